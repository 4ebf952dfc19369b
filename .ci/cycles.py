#!/usr/bin/env python3
"""Finds import cycles between the modules of Rust crates.

    python3 .ci/cycles.py [-v] SRC_DIR...

Each SRC_DIR is a crate's `src/` folder. Every `.rs` file under it is one module (`lib.rs` and
`main.rs` are the crate root, `x/mod.rs` is `x`). A module depends on another when its code
(tests included, comments and string literals not) names it by path: `crate::a::b`,
`super::a`, `self::a`, or a child module declared with `mod a;`, in a `use` declaration
(brace groups included) or inline. A path resolves to the deepest file module it names, so
`crate::shm::lock::ShmLock` is a dependency on `shm/lock` and `crate::shm::unlink` one on `shm`.

Folders count as a whole: `shm/wait` using `scope` and `scope` using `shm/lock` is a cycle
between `shm` and `scope`. A module and the modules inside it (`shm` and `shm/lock`, the
crate root and everything) are one unit, and the edges between them do not count.

The house rule is that a module imports only from the ones below it, never in a circle: this
prints every strongly connected component of more than one module, with the lines that make
each of its edges, and exits with status 1 if there is any. `-v` also prints every edge.
"""

import os
import re
import sys

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def strip(src):
    """`src` with comments, string, byte-string and char literals blanked out (newlines kept,
    so that line numbers still hold)."""
    out = []
    i, n = 0, len(src)

    def blank(text):
        out.append(re.sub(r"[^\n]", " ", text))

    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            blank(src[i:j])
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            blank(src[i:j])
            i = j
        elif (m := re.compile(r'(?:b|c)?r(#*)"').match(src, i)) and (
            i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")
        ):
            end = '"' + m.group(1)
            j = src.find(end, m.end())
            j = n if j < 0 else j + len(end)
            blank(src[i:j])
            i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            blank(src[i : j + 1])
            i = j + 1
        elif c == "'" and (
            m := re.compile(r"'(?:\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'])'").match(src, i)
        ):
            # A char literal; a lifetime ('a) has no closing quote and is left alone.
            blank(m.group(0))
            i = m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def modules(root):
    """{module: (path, stripped source)}, modules named like `shm/lock` (`crate` for the root)."""
    mods = {}
    for dirpath, _, files in os.walk(root):
        for f in sorted(files):
            if not f.endswith(".rs"):
                continue
            path = os.path.join(dirpath, f)
            parts = os.path.relpath(path, root)[:-3].split(os.sep)
            if parts[-1] == "mod" or (len(parts) == 1 and parts[0] in ("lib", "main")):
                parts = parts[:-1]
            name = "/".join(parts) or "crate"
            with open(path, encoding="utf-8") as fh:
                mods[name] = (path, strip(fh.read()))
    return mods


def parse_use_tree(text, i, prefix, out):
    """Parses the use tree at `text[i:]` (after `use`), appending full paths (lists of
    segments) to `out`; returns the index after the tree."""
    segs = list(prefix)
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if text.startswith("::", i):
            i += 2
            continue
        if i < len(text) and text[i] == "{":
            i += 1
            while True:
                while i < len(text) and (text[i].isspace() or text[i] == ","):
                    i += 1
                if i >= len(text) or text[i] == "}":
                    return i + 1
                i = parse_use_tree(text, i, segs, out)
        m = IDENT.match(text, i) if i < len(text) else None
        if m:
            segs.append(m.group(0))
            i = m.end()
            continue
        if i < len(text) and text[i] == "*":
            i += 1
        out.append(segs)
        # Skip an `as NAME` rename.
        m = re.compile(r"\s*as\s+[A-Za-z_][A-Za-z0-9_]*").match(text, i)
        return m.end() if m else i


def paths(src):
    """(line, segments) for every module path in `src`: use trees, then inline paths."""
    found = []
    uses = []
    for m in re.finditer(r"\buse\s+", src):
        trees = []
        end = parse_use_tree(src, m.end(), [], trees)
        line = src.count("\n", 0, m.start()) + 1
        found.extend((line, t) for t in trees)
        uses.append((m.start(), end))
    for m in re.finditer(r"\b[A-Za-z_][A-Za-z0-9_]*(?:\s*::\s*[A-Za-z_][A-Za-z0-9_]*)+", src):
        if any(a <= m.start() < b for a, b in uses):
            continue
        if m.start() >= 2 and src[m.start() - 2 : m.start()] == "::":
            continue
        line = src.count("\n", 0, m.start()) + 1
        found.append((line, re.split(r"\s*::\s*", m.group(0))))
    return found


def resolve(mods, me, children, segs):
    """The file module that `segs`, written in module `me`, names (its deepest one), or None."""
    if not segs:
        return None
    if segs[0] == "crate":
        base, rest = [], segs[1:]
    elif segs[0] in ("super", "self"):
        base = [] if me == "crate" else me.split("/")
        rest = segs
        while rest and rest[0] in ("super", "self"):
            if rest[0] == "super":
                base = base[:-1]
            rest = rest[1:]
    elif segs[0] in children:
        base, rest = ([] if me == "crate" else me.split("/")), segs
    else:
        return None
    best = None
    for k in range(1, len(rest) + 1):
        name = "/".join(base + rest[:k])
        if name in mods:
            best = name
        else:
            break
    if best is None:
        best = "/".join(base) or "crate"
    return best if best in mods and best != me else None


def split(module):
    return [] if module == "crate" else module.split("/")


def graph(root):
    """{unit: {dependency: [(path, line), ...]}} for the crate at `root`.

    The units are modules together with the modules inside them: an edge from `a/x` to `b/y`
    is an edge from `a` to `b` (and one from `a/x` to `a/y` stays as it is), so that two
    folders that use each other are a cycle however their files are arranged. A module and the
    modules inside it are one unit: a parent declares and re-exports its children, and the
    children use what the parent shares with them, so edges between them do not count."""
    mods = modules(root)
    g = {m: {} for m in mods}
    for me, (path, src) in mods.items():
        children = set(re.findall(r"\bmod\s+([A-Za-z_][A-Za-z0-9_]*)\s*;", src))
        for line, segs in paths(src):
            dep = resolve(mods, me, children, segs)
            if not dep:
                continue
            a, b = split(me), split(dep)
            k = 0
            while k < min(len(a), len(b)) and a[k] == b[k]:
                k += 1
            if k == len(a) or k == len(b):
                continue  # one is inside the other
            src_unit, dst_unit = "/".join(a[: k + 1]), "/".join(b[: k + 1])
            g.setdefault(src_unit, {}).setdefault(dst_unit, []).append((path, line))
    return g


def sccs(g):
    """The strongly connected components of `g` (Tarjan), each sorted; iterative."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = 0
    for start in sorted(g):
        if start in index:
            continue
        work = [(start, iter(sorted(g[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(g.get(nxt, ())))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                out.append(sorted(comp))
    return out


def main(argv):
    verbose = "-v" in argv
    roots = [a for a in argv if a != "-v"]
    if not roots:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    failed = False
    for root in roots:
        if not os.path.isdir(root):
            print(f"{root}: no such directory", file=sys.stderr)
            return 2
        g = graph(root)
        if verbose:
            for m in sorted(g):
                for d in sorted(g[m]):
                    print(f"{root}: {m} -> {d}")
        cycles = [c for c in sccs(g) if len(c) > 1]
        if not cycles:
            print(f"{root}: no import cycles ({len(g)} modules)")
            continue
        failed = True
        for comp in cycles:
            print(f"{root}: import cycle between {', '.join(comp)}:")
            for m in comp:
                for d in sorted(set(g[m]) & set(comp)):
                    lines = sorted(set(g[m][d]))
                    where = ", ".join(f"{p}:{n}" for p, n in lines[:3])
                    more = len(lines) - 3
                    print(f"  {m} -> {d}  ({where}{f', +{more}' if more > 0 else ''})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
