#!/usr/bin/env python3
"""Fails on a dependency cycle between the top-level modules of a crate, on
a circle between its files, and on a file that names the crate root.

For each crate root given (a `lib.rs`), every top-level module (`mod x;` in
the root: `x.rs` or `x/`) is a node, and module A depends on module B when a
file of A names `crate::B` (a path or a `use`). The root file itself is the
wiring (`lib`): it may name every module, and none may name it. A cycle is
printed with the files that make each edge, and the exit status is 1.

Files: every `.rs` file is a node, and file A depends on file B when A
names (`use crate::…`, `use super::…`, or a path in code) an item of B's
module. A parent module's file and its own children's files may name
each other (`mod.rs` wires its children; a child's `super::` is its
parent); every other circle fails, each printed with the names that make
its edges. `#[cfg(test)]` inline modules make no dependencies; names the
root re-exports from another crate (`pub use x as y;`) are not the root.

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


def circles(graph):
    """The strongly connected parts of more than one node (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = set()
            while True:
                w = stack.pop()
                on.discard(w)
                part.add(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(part)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


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


IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
USE_STMT = re.compile(r"\buse\s+((?:crate|super|self)\b[^;]*);", re.S)
INLINE_MOD = re.compile(r"(#\[cfg\(test\)\]\s*)?\bmod\s+(" + IDENT + r")\s*\{")
INLINE_PATH = re.compile(r"\b((?:crate|super)(?:::" + IDENT + r")+)")


def expand(tree):
    """`a::{b, c::{d, e}}` → ["a::b", "a::c::d", "a::c::e"]."""
    tree = re.sub(r"\s+", "", tree)
    brace = tree.find("{")
    if brace < 0:
        return [tree.split(" as ")[0]]
    head, body = tree[:brace], tree[brace + 1 : tree.rfind("}")]
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(body):
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    parts.append(body[start:])
    return [p for part in parts if part for p in expand(head + part)]


def split_inline(text):
    """The text of a file without its inline modules, and each non-test
    inline module's (name, text); `#[cfg(test)]` modules are dropped (they
    make no dependencies)."""
    inner, out, pos = [], [], 0
    for m in INLINE_MOD.finditer(text):
        if m.start() < pos:
            continue
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += text[i] == "{"
            depth -= text[i] == "}"
            i += 1
        out.append(text[pos : m.start()])
        if not m.group(1):
            inner.append((m.group(2), text[m.end() : i - 1]))
        pos = i
    out.append(text[pos:])
    return "".join(out), inner


def external_names(root_text):
    """Names the root re-exports from other crates (`pub use x as y;`)."""
    return set(re.findall(r"^\s*pub\s+use\s+" + IDENT + r"\s+as\s+(" + IDENT + r")\s*;", root_text, re.M))


def crate_files(root):
    """Every .rs file of the crate rooted at `root`, by module path."""
    root_dir = os.path.dirname(root)
    files = {(): root}
    for dirpath, _, names in os.walk(root_dir):
        for n in names:
            if not n.endswith(".rs"):
                continue
            path = os.path.join(dirpath, n)
            if path == root:
                continue
            rel = os.path.relpath(path, root_dir)[: -len(".rs")].split(os.sep)
            if rel[-1] == "mod":
                rel = rel[:-1]
            files[tuple(rel)] = path
    return files


def resolve(files, here, path):
    """The file that defines the longest module prefix of `path`, named in
    the file of module `here` (a `mod.rs` or root is its own module)."""
    parts = path.split("::")
    if parts[0] == "crate":
        base, rest = (), parts[1:]
    else:
        base = list(here)
        rest = parts
        while rest and rest[0] in ("super", "self"):
            if rest[0] == "super":
                base = base[:-1]
            rest = rest[1:]
        base = tuple(base)
    mod = tuple(base) + tuple(p for p in rest if p != "*")
    while mod not in files:
        mod = mod[:-1]
    return mod


def file_cycles(root):
    """Circles between the files of one crate (a parent module file and its
    own children aside); the names of the root's items (`lib`) too."""
    files = crate_files(root)
    external = external_names(source(root))
    graph, why, named_lib = {}, {}, []

    def scan(mod, path, text, inline=()):
        text, inner = split_inline(text)
        for name, body in inner:
            scan(mod, path, body, inline + (name,))
        refs = [p for tree in USE_STMT.findall(text) for p in expand(tree)]
        refs += INLINE_PATH.findall(USE_STMT.sub("", text))
        for ref in refs:
            parts = ref.split("::")
            if parts[0] == "crate" and len(parts) > 1 and parts[1] in external:
                continue
            target = resolve(files, mod + inline, ref)
            if target == mod:
                continue
            if target == () and mod != ():
                named_lib.append((os.path.relpath(path), ref))
                continue
            parent_child = target == mod[:-1] or mod == target[:-1]
            if not parent_child:
                graph[mod].add(target)
                why.setdefault((mod, target), set()).add(ref)

    for mod, path in files.items():
        graph[mod] = set()
        scan(mod, path, source(path))
    ok = True
    for path, ref in sorted(set(named_lib)):
        print(f"{root}: {path} names the crate root: {ref}", file=sys.stderr)
        ok = False
    def name(m):
        return os.path.relpath(files[m])

    for part in circles(graph):
        print(f"{root}: file circle: {' '.join(sorted(name(m) for m in part))}", file=sys.stderr)
        for a in sorted(part):
            for b in sorted(graph[a] & part):
                print(f"  {name(a)} -> {name(b)}: {', '.join(sorted(why[(a, b)])[:3])}", file=sys.stderr)
        ok = False
    edges = sum(len(v) for v in graph.values())
    print(f"{root}: {len(files)} files, {edges} edges between files")
    return ok


def main(roots):
    ok = all([check(root) for root in roots])
    ok = all([file_cycles(root) for root in roots]) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["src/lib.rs", "core/src/lib.rs"]))
