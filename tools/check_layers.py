#!/usr/bin/env python3
"""check_layers: every include between the library's layers follows cmake/layers.txt.

Checks, over src/, apps/, tests/ and bench/ (C++ and CUDA sources: .h, .cpp, .cu, .cuh):
  - src/ holds folders only, one per layer in cmake/layers.txt, each with a README.md;
  - a file in src/<layer>/ includes project headers only from its own layer or from the layers
    cmake/layers.txt lets it use (which must be listed above it);
  - no project header is included by its bare name (every include names its layer folder);
  - the layer diagram of docs/architecture.md lists the layers in the order of cmake/layers.txt.
Exits 1 naming each offending file:line. Usage: check_layers.py [PROJECT_ROOT]
"""
import os
import re
import sys

root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..'))
errors = []

layers, deps = [], {}
with open(os.path.join(root, 'cmake/layers.txt')) as f:
    for n, line in enumerate(f, 1):
        line = line.split('#', 1)[0].strip()
        if not line:
            continue
        m = re.match(r'^([a-z_]+):\s*(.*)$', line)
        if not m:
            errors.append(f'cmake/layers.txt:{n}: cannot parse "{line}"')
            continue
        name, used = m.group(1), m.group(2).split()
        for d in used:
            if d not in layers:
                errors.append(f'cmake/layers.txt:{n}: layer {name} uses {d}, which is not listed above it')
        layers.append(name)
        deps[name] = set(used)

src = os.path.join(root, 'src')
for entry in sorted(os.listdir(src)):
    path = os.path.join(src, entry)
    if not os.path.isdir(path):
        errors.append(f'src/{entry}: src/ holds layer folders only')
    elif entry not in deps:
        errors.append(f'src/{entry}: folder is not a layer of cmake/layers.txt')
    elif not os.path.isfile(os.path.join(path, 'README.md')):
        errors.append(f'src/{entry}: no README.md')
for layer in layers:
    if not os.path.isdir(os.path.join(src, layer)):
        errors.append(f'cmake/layers.txt: layer {layer} has no folder src/{layer}')

include = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
headers = set()
for dirpath, _, files in os.walk(src):
    for f in files:
        if f.endswith(('.h', '.cuh')):
            headers.add(f)

for top in ('src', 'apps', 'tests', 'bench'):
    for dirpath, _, files in os.walk(os.path.join(root, top)):
        for f in sorted(files):
            if not f.endswith(('.h', '.cpp', '.cu', '.cuh')):
                continue
            p = os.path.join(dirpath, f)
            rel = os.path.relpath(p, root)
            parts = rel.split(os.sep)
            layer = parts[1] if top == 'src' else None
            with open(p, encoding='utf-8', errors='replace') as fh:
                for n, line in enumerate(fh, 1):
                    m = include.match(line)
                    if not m:
                        continue
                    target = m.group(1)
                    first = target.split('/', 1)[0]
                    if first in deps:
                        if layer is not None and first != layer and first not in deps[layer]:
                            errors.append(f'{rel}:{n}: layer {layer} includes "{target}" from layer {first}, '
                                          f'which cmake/layers.txt does not let it use')
                    elif top == 'src':
                        errors.append(f'{rel}:{n}: "{target}" does not name a layer folder')
                    elif '/' not in target and target in headers and not os.path.exists(os.path.join(dirpath, target)):
                        errors.append(f'{rel}:{n}: "{target}" is a library header included without its layer folder')

arch = os.path.join(root, 'docs/architecture.md')
with open(arch) as f:
    text = f.read()
m = re.search(r'<!-- layers -->(.*?)<!-- /layers -->', text, re.S)
if not m:
    errors.append('docs/architecture.md: no layer diagram between <!-- layers --> and <!-- /layers -->')
else:
    found = [w for w in re.findall(r'\b([a-z_]+)/', m.group(1)) if w in deps]
    order = list(dict.fromkeys(found))
    if order != list(reversed(layers)) and order != layers:
        errors.append(f'docs/architecture.md: the layer diagram lists {order}, cmake/layers.txt has {layers}')

for e in errors:
    print(e)
print(f'check_layers: {len(layers)} layers, {len(errors)} problem(s)')
sys.exit(1 if errors else 0)
