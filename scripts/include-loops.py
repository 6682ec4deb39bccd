#!/usr/bin/env python3
"""Prints the include loops inside folders: a file's unit is its name without .h/.cpp (a header and
its source are one unit), and unit A depends on unit B of the same folder when one of A's files
includes one of B's. Exit status 1 when there is a loop. Usage: include-loops.py ROOT FOLDER..."""
import os
import re
import sys

root = sys.argv[1]
include = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]')
graph = {}  # (folder, unit) -> set of units of the same folder
for top in sys.argv[2:]:
    for folder, _, files in os.walk(os.path.normpath(os.path.join(root, top))):
        for name in files:
            stem, ext = os.path.splitext(name)
            if ext not in ('.h', '.cpp'):
                continue
            unit = (folder, stem)
            graph.setdefault(unit, set())
            with open(os.path.join(folder, name), errors='replace') as f:
                for line in f:
                    m = include.match(line)
                    if not m:
                        continue
                    target = m.group(1)
                    for base in (folder, root):  # "x.h" beside it, or <a/b/x.h> from the root
                        path = os.path.normpath(os.path.join(base, target))
                        if os.path.isfile(path) and os.path.dirname(path) == folder:
                            other = os.path.splitext(os.path.basename(path))[0]
                            if other != stem:
                                graph[unit].add((folder, other))
                            break

loops = set()
def visit(unit, path, onpath):
    for nxt in graph.get(unit, ()):
        if nxt in onpath:
            cycle = path[path.index(nxt):]
            loops.add(tuple(sorted(u[1] for u in cycle)) + (os.path.relpath(unit[0], root),))
        elif len(path) < 12:
            visit(nxt, path + [nxt], onpath | {nxt})
for unit in graph:
    visit(unit, [unit], {unit})
for loop in sorted(loops):
    print('include loop in %s/: %s' % (loop[-1], ' <-> '.join(loop[:-1])))
sys.exit(1 if loops else 0)
