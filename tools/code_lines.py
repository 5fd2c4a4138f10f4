#!/usr/bin/env python3
"""The house's shape in numbers: fails on a Rust source file over 600 code
lines, and prints how much of the production code is pure.

A code line is one that is neither blank nor only a `//` comment. A file
over the limit passes only if its first comment says why (names "600":
a test table kept in one file so that it reads as one specification).
Production lines leave out test files (`tests.rs`, files under `tests/`)
and `#[cfg(test)]` inline modules; the pure share is `core/` + `protocol/`
over `src/` + `core/` + `protocol/`.

    tools/code_lines.py            # src core/src protocol/src client/src bots/src
"""

import os
import sys

from module_cycles import split_inline

LIMIT = 600


def is_code(line):
    s = line.strip()
    return bool(s) and not s.startswith("//")


def first_comment(text):
    lines = []
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("//"):
            lines.append(s)
        elif s:
            break
    return " ".join(lines)


def without_test_modules(text):
    """The text without its `#[cfg(test)]` inline modules."""
    outer, inner = split_inline(text)
    return outer + "".join(body for _, body in inner)


def is_test_file(path):
    parts = path.split(os.sep)
    return parts[-1] == "tests.rs" or "tests" in parts[:-1]


def rust_files(root):
    for dirpath, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "target")
        for n in sorted(names):
            if n.endswith(".rs"):
                yield os.path.join(dirpath, n)


def main(roots):
    ok, production = True, {}
    for root in roots:
        total = 0
        for path in rust_files(root):
            with open(path, encoding="utf-8") as f:
                text = f.read()
            lines = sum(map(is_code, text.splitlines()))
            if lines > LIMIT and str(LIMIT) not in first_comment(text):
                print(f"{path}: {lines} code lines (limit {LIMIT})", file=sys.stderr)
                ok = False
            if not is_test_file(path):
                total += sum(map(is_code, without_test_modules(text).splitlines()))
        production[root] = total
    pure = production.get("core/src", 0) + production.get("protocol/src", 0)
    every = pure + production.get("src", 0)
    figures = ", ".join(f"{root} {n}" for root, n in production.items())
    if every:
        print(f"production code lines: {figures}; core + protocol: {100 * pure / every:.1f} %")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["src", "core/src", "protocol/src", "client/src", "bots/src"]))
