"""Builds the optional native solver, ``pow_shield._native`` (the protocol
crate's SHA-NI search through PyO3, from ``native/``), with setuptools-rust.

It is optional twice over: without setuptools-rust (an install without
build isolation), or when the build fails (no Rust toolchain, no network
for the crates), the package installs without it and ``solve`` runs the
pure-Python solver; ``pow_shield.solver_info()`` says which one runs.
``POW_SHIELD_NO_NATIVE=1`` at install time skips the build.
"""

import os

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

IN_REPO = os.path.isfile(os.path.join(REPO, "Cargo.toml"))

# In the repository, setuptools' build directory is under target/ too: a
# build/ left in clients/python would be copied with it by the tests that
# install a copy, and its older files (same mtimes after the copy) would be
# installed instead of the new ones.
options = {"build": {"build_base": os.path.join(REPO, "target", "python-build")}} if IN_REPO else {}

rust_extensions = []
if not os.environ.get("POW_SHIELD_NO_NATIVE"):
    # In the repository, cargo's output goes to its target/ (warm, and not
    # under clients/python, which the tests copy).
    if IN_REPO and "CARGO_TARGET_DIR" not in os.environ:
        os.environ["CARGO_TARGET_DIR"] = os.path.join(REPO, "target", "python-native")
    try:
        from setuptools_rust import Binding, RustExtension
    except ImportError:
        pass
    else:
        rust_extensions.append(
            RustExtension(
                "pow_shield._native",
                path="native/Cargo.toml",
                binding=Binding.PyO3,
                py_limited_api="cp38",
                optional=True,
                debug=False,
            )
        )

setup(rust_extensions=rust_extensions, zip_safe=False, options=options)
