#!/usr/bin/env python3
"""compile-db.py BUILD_DIR OUT_DIR: writes OUT_DIR/compile_commands.json from
BUILD_DIR's with one entry per source file. A unity build (CLUSTERD_UNITY_BUILD,
cmake/Unity.cmake) lists its batches (<build>/unity/<target>_N.cc, which include
their files by paths relative to the batch) instead of the files they include;
clang-tidy (scripts/lint.sh) needs each file, compiled alone with its batch's
command."""
import json, os, re, sys

build, out_dir = sys.argv[1], sys.argv[2]
entries = json.load(open(os.path.join(build, 'compile_commands.json')))
unity_dir = os.path.join(os.path.realpath(build), 'unity')
result = []
for e in entries:
    src = e['file']
    path = src if os.path.isabs(src) else os.path.join(e['directory'], src)
    if os.path.dirname(os.path.realpath(path)) != unity_dir:
        result.append(e)
        continue
    for line in open(path):
        m = re.match(r'#include "(.+)"', line)
        if not m:
            continue
        member = os.path.normpath(os.path.join(os.path.dirname(path), m.group(1)))
        cmd = e.get('command')
        if cmd is not None:
            cmd = cmd.replace(src, member)
        item = dict(e, file=member)
        if cmd is not None:
            item['command'] = cmd
        if 'arguments' in e:
            item['arguments'] = [member if a == src else a for a in e['arguments']]
        result.append(item)
os.makedirs(out_dir, exist_ok=True)
json.dump(result, open(os.path.join(out_dir, 'compile_commands.json'), 'w'), indent=1)
