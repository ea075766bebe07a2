#!/usr/bin/env python3
"""Fails on any folder-level include cycle among the product's folders.

A folder is a room: clusterd/<name> (its subfolders count as the room:
clusterd/recovery/coordinator is clusterd/recovery), common/, noded/ and
clusterctl/. An edge A -> B is a file under A that includes a header under B
("#include \"B/...\""). Layering (docs/architecture.md) wants those edges to
form no cycle: a cycle means two rooms cannot be built, tested or reasoned
about one without the other. Generated protobuf headers (clusterd/v1/...) are
not a folder of the tree and are left out.

  python3 scripts/check-include-cycles.py [--allow A,B ...] [ROOT]

ROOT: the source tree (default: this checkout). --allow A,B: a cycle whose
folders are exactly A and B (a strongly connected component) is reported but
does not fail; for a cycle known and being removed elsewhere, never for a new
one. Prints every cycle found (each once, as its strongly connected
component) with one example include per edge inside it.
"""
import argparse
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
TOPS = ("clusterd", "common", "noded", "clusterctl")
SUFFIXES = (".h", ".cc", ".cpp", ".hpp", ".inc", ".in")


def folder_of(path):
    """The room a repository-relative path belongs to, or None."""
    parts = path.split("/")
    if parts[0] not in TOPS:
        return None
    if parts[0] == "clusterd":
        if len(parts) < 3 or parts[1] == "v1":  # clusterd/main.cc, generated protos
            return "clusterd" if len(parts) == 2 else None
        return "clusterd/" + parts[1]
    return parts[0]


def edges(root):
    out = {}  # (from, to) -> example "file: include"
    for top in TOPS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            for name in filenames:
                if not name.endswith(SUFFIXES):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                src = folder_of(rel)
                if src is None:
                    continue
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for inc in INCLUDE.findall(text):
                    dst = folder_of(inc)
                    if dst is None or dst == src:
                        continue
                    out.setdefault((src, dst), f"{rel}: #include \"{inc}\"")
    return out


def cycles(graph):
    """Strongly connected components with more than one folder (Tarjan)."""
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return comps


def main():
    parser = argparse.ArgumentParser(description="Fails on a folder-level include cycle.")
    parser.add_argument("--allow", action="append", default=[], metavar="A,B",
                        help="a known cycle (its folders, comma-separated) that does not fail")
    parser.add_argument("root", nargs="?", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    args = parser.parse_args()
    root = args.root
    allowed = {tuple(sorted(a.split(","))) for a in args.allow}
    found = edges(root)
    if not found:
        print(f"check-include-cycles: no includes found under {root}", file=sys.stderr)
        return 2
    graph = {}
    for src, dst in found:
        graph.setdefault(src, set()).add(dst)
        graph.setdefault(dst, set())
    comps = cycles(graph)
    failed = False
    for comp in comps:
        known = tuple(comp) in allowed
        failed = failed or not known
        print(("known (allowed) " if known else "") + "include cycle among: " + ", ".join(comp), file=sys.stderr)
        members = set(comp)
        for (src, dst), example in sorted(found.items()):
            if src in members and dst in members:
                print(f"  {src} -> {dst}   ({example})", file=sys.stderr)
    for gone in sorted(allowed - {tuple(c) for c in comps}):
        print("allowed cycle " + ", ".join(gone) + " is gone: drop its --allow", file=sys.stderr)
    if failed:
        print("check-include-cycles: break each cycle (docs/architecture.md, \"Layering\")", file=sys.stderr)
        return 1
    print(f"check-include-cycles: {len(graph)} folders, {len(found)} edges, "
          + ("only the allowed cycles" if comps else "no cycle"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
