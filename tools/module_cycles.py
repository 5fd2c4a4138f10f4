#!/usr/bin/env python3
"""Fails on a dependency cycle between the top-level modules of a crate.

For each crate root given (a `lib.rs`), every top-level module (`mod x;` in
the root: `x.rs` or `x/`) is a node, and module A depends on module B when a
file of A names `crate::B` (a path or a `use`). The root file itself is the
wiring (`lib`): it may name every module, and none may name it. A cycle is
printed with the files that make each edge, and the exit status is 1.

    tools/module_cycles.py src/lib.rs core/src/lib.rs
"""

import os
import re
import sys

MOD_DECL = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*[;{]", re.M)
CRATE_PATH = re.compile(r"\bcrate::([a-z_][a-z0-9_]*)")
USE_CRATE_GROUP = re.compile(r"\buse\s+crate::\{([^}]*)\}", re.S)
# `#[cfg(test)]` modules and comments do not make dependencies.
LINE_COMMENT = re.compile(r"//[^\n]*")


def source(path):
    with open(path, encoding="utf-8") as f:
        return LINE_COMMENT.sub("", f.read())


def module_files(root_dir, name):
    """Every .rs file of the top-level module `name`."""
    single = os.path.join(root_dir, name + ".rs")
    files = [single] if os.path.isfile(single) else []
    folder = os.path.join(root_dir, name)
    for dirpath, _, names in os.walk(folder):
        files += [os.path.join(dirpath, n) for n in sorted(names) if n.endswith(".rs")]
    return files


def edges_of(text, modules):
    named = set(CRATE_PATH.findall(text))
    for group in USE_CRATE_GROUP.findall(text):
        named |= {part.strip().split("::")[0] for part in group.split(",")}
    return named & modules


def find_cycle(graph):
    state = {}
    stack = []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def check(root):
    root_dir = os.path.dirname(root)
    text = source(root)
    # Inline modules of the root (`mod x { ... }`) are part of the wiring.
    inline = set(re.findall(r"^\s*(?:pub\s+)?mod\s+([a-z_][a-z0-9_]*)\s*\{", text, re.M))
    modules = set(MOD_DECL.findall(text)) - inline
    graph, why = {}, {}
    for name in sorted(modules):
        graph[name] = set()
        for path in module_files(root_dir, name):
            for dep in edges_of(source(path), modules) - {name}:
                graph[name].add(dep)
                why.setdefault((name, dep), []).append(os.path.relpath(path))
    order = " ".join(f"{a}->{b}" for a in sorted(graph) for b in sorted(graph[a]))
    print(f"{root}: {len(modules)} modules; {order or 'no edges'}")
    cycle = find_cycle(graph)
    if not cycle:
        return True
    print(f"{root}: dependency cycle: {' -> '.join(cycle)}", file=sys.stderr)
    for a, b in zip(cycle, cycle[1:]):
        print(f"  {a} -> {b}: {', '.join(why[(a, b)][:4])}", file=sys.stderr)
    return False


def main(roots):
    ok = all([check(root) for root in roots])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["src/lib.rs", "core/src/lib.rs"]))
