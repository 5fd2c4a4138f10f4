"""Builds the optional native solver, ``pow_shield._native`` (the protocol
crate's SHA-NI search through PyO3, from ``native/``), with setuptools-rust.

It is optional twice over: without setuptools-rust (an install without
build isolation), without a Rust toolchain (no ``cargo``), or when the
build fails (no network for the crates), the package installs without it
and ``solve`` runs the pure-Python solver. The package is told why
(``pow_shield/_build.py``, written here): ``pow_shield.solver_info()``
says it, and the first solve warns (``RuntimeWarning``) unless the build
was skipped on purpose: ``POW_SHIELD_NO_NATIVE=1`` at install time.
"""

import os
import shutil
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

IN_REPO = os.path.isfile(os.path.join(REPO, "Cargo.toml"))

# In the repository, setuptools' build directory is under target/ too: a
# build/ left in clients/python would be copied with it by the tests that
# install a copy, and its older files (same mtimes after the copy) would be
# installed instead of the new ones.
options = {"build": {"build_base": os.path.join(REPO, "target", "python-build")}} if IN_REPO else {}


def cargo_found() -> bool:
    """setuptools-rust runs $CARGO, else the first cargo on PATH."""
    cargo = os.environ.get("CARGO", "cargo")
    return os.path.isfile(cargo) or shutil.which(cargo) is not None


rust_extensions = []
# Why the native solver is not built ("": it is, unless its build fails).
skipped = ""
if os.environ.get("POW_SHIELD_NO_NATIVE"):
    skipped = "POW_SHIELD_NO_NATIVE was set"
else:
    # In the repository, cargo's output goes to its target/ (warm, and not
    # under clients/python, which the tests copy).
    if IN_REPO and "CARGO_TARGET_DIR" not in os.environ:
        os.environ["CARGO_TARGET_DIR"] = os.path.join(REPO, "target", "python-native")
    try:
        from setuptools_rust import Binding, RustExtension
    except ImportError:
        skipped = "setuptools-rust was missing (an install without build isolation)"
    else:
        if not cargo_found():
            skipped = "no Rust toolchain (cargo) was found"
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
if skipped:
    print(f"pow-shield: the native solver is not built: {skipped}; solving in pure Python", file=sys.stderr)


class BuildPy(build_py):
    """Also writes ``pow_shield/_build.py``: why the native solver was not
    built, for ``solver_info()`` and the warning."""

    def run(self) -> None:
        super().run()
        target = os.path.join(self.build_lib, "pow_shield", "_build.py")
        with open(target, "w", encoding="utf-8") as f:
            f.write('"""Written by setup.py at install: why the native solver was not built."""\n\n')
            f.write(f"NATIVE_SKIPPED = {skipped!r}\n")


setup(rust_extensions=rust_extensions, zip_safe=False, options=options, cmdclass={"build_py": BuildPy})
