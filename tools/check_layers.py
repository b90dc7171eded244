#!/usr/bin/env python3
"""check_layers: every include between the library's layers follows cmake/layers.txt, every source
file of a layer is named in its folder's README, and no two files define the same type.

Checks, over src/, apps/, tests/ and bench/ (C++ and CUDA sources: .h, .cpp, .cu, .cuh):
  - src/ holds folders only, one per layer in cmake/layers.txt, each with a README.md;
  - a file in src/<layer>/ includes project headers only from its own layer or from the layers
    cmake/layers.txt lets it use (which must be listed above it);
  - no project header is included by its bare name (every include names its layer folder);
  - the layer diagram of docs/architecture.md lists the layers in the order of cmake/layers.txt;
  - every source file of src/<layer>/ (subfolders included) is named in src/<layer>/README.md,
    inside backticks, by its path relative to the layer folder (`dp/zero_dp.h`) or, in a subfolder,
    relative to that subfolder (`zero_dp.h`); with its extension (`x.h`), as a pair in brace form
    (`x.{h,cpp}`, `{a,b}.h`), or by its stem alone (`x`, naming every x.* of the folder);
  - no two files under src/ define a class, struct, union or enum of the same name at namespace
    scope of the same namespace (anonymous namespaces excepted; forward declarations and template
    specialisations do not count): the One Definition Rule, which the linker does not check.
Exits 1 naming each offending file:line (or file and README, or both files). Usage:
check_layers.py [PROJECT_ROOT]
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


SOURCE_EXT = ('.h', '.cpp', '.cu', '.cuh')


def brace_expand(token):
    """`x.{h,cpp}` -> [x.h, x.cpp]; `{a,b}/c.h` -> [a/c.h, b/c.h]; nested braces are expanded too."""
    m = re.search(r'\{([^{}]*)\}', token)
    if not m:
        return [token]
    out = []
    for alt in m.group(1).split(','):
        out += brace_expand(token[:m.start()] + alt.strip() + token[m.end():])
    return out


def readme_names(text):
    """The names a README gives in backticks (split at whitespace and commas, braces expanded)."""
    names = set()
    for quoted in re.findall(r'`([^`]+)`', text):
        for word in re.split(r'[\s,]+(?![^{]*\})', quoted):
            for name in brace_expand(word.strip('()[]:;.')):
                if name:
                    names.add(name.rstrip('/'))
    return names


def check_readme_lists_files(layer):
    folder = os.path.join(src, layer)
    readme = os.path.join(folder, 'README.md')
    if not os.path.isfile(readme):
        return  # reported above
    with open(readme, encoding='utf-8') as fh:
        names = readme_names(fh.read())
    for dirpath, _, files in os.walk(folder):
        for f in sorted(files):
            if not f.endswith(SOURCE_EXT):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), folder).replace(os.sep, '/')
            forms = {rel, os.path.splitext(rel)[0]}
            if '/' in rel:  # also by the name inside its subfolder
                forms |= {f, os.path.splitext(f)[0]}
            if not forms & names:
                errors.append(f'src/{layer}/{rel}: not named in src/{layer}/README.md (name it in backticks, '
                              f'e.g. `{rel}`, with a line saying what it holds)')


for layer in layers:
    if os.path.isdir(os.path.join(src, layer)):
        check_readme_lists_files(layer)


def blank_literals(text):
    """text with comments, string and character literals blanked (newlines kept), for scanning braces."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('//', i):
            j = text.find('\n', i)
            i = n if j < 0 else j
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append('\n' * text.count('\n', i, j))
            i = j
        elif c == '"' and i > 0 and text[i - 1] == 'R' and not (i > 1 and (text[i - 2].isalnum() or text[i - 2] == '_') and text[i - 2] not in 'uUL8'):
            m = re.match(r'"([^(\s]*)\(', text[i:])
            end = text.find(')' + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + '\n' * text.count('\n', i, j))
            i = j
        elif c == '"' or (c == "'" and not (i > 0 and text[i - 1].isalnum())):  # not a digit separator
            j = i + 1
            while j < n and text[j] != c and text[j] != '\n':
                j += 2 if text[j] == '\\' else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return ''.join(out)


type_def = re.compile(r'^\s*(?:template\s*<.*>\s*)?(?:struct|class|union|enum\s+class|enum\s+struct|enum)\s+'
                      r'(?:\[\[[^\]]*\]\]\s*|alignas\s*\([^)]*\)\s*)*([A-Za-z_]\w*(?:::[A-Za-z_]\w*)*)\s*(.*)$')
scope_token = re.compile(r'\bnamespace\s+([\w:]+)\s*\{|\bnamespace\s*\{|\bextern\s*""\s*\{|\{|\}')


def namespace_scope_types(path):
    """(namespace, type name, line) of every type defined at namespace scope of a file."""
    with open(path, encoding='utf-8', errors='replace') as fh:
        lines = blank_literals(fh.read()).split('\n')
    found, stack, pending_ns, continued = [], [], None, False
    for n, line in enumerate(lines, 1):
        if continued or line.lstrip().startswith('#'):  # preprocessor lines and their continuations
            continued = line.rstrip().endswith('\\')
            continue
        if all(kind in ('ns', 'extern') for kind, _ in stack):
            m = type_def.match(line)
            rest = m.group(2) if m else ''
            if m and (rest == '' or rest.startswith(('{', ':', 'final'))) and not re.match(r'(final\s*)?(:[^;{]*)?;', rest):
                found.append(('::'.join(name for kind, name in stack if kind == 'ns'), m.group(1), n))
        for t in scope_token.finditer(line):
            tok = t.group(0)
            if tok == '}':
                if stack:
                    stack.pop()
            elif tok.startswith('namespace'):
                name = t.group(1)
                stack.append(('ns', name) if name else ('anon', ''))
            elif tok.startswith('extern'):
                stack.append(('extern', ''))
            elif pending_ns is not None:
                stack.append(pending_ns)
                pending_ns = None
                continue
            else:
                stack.append(('other', ''))
        m = re.match(r'^\s*namespace\s*([\w:]*)\s*$', line)  # `namespace x` with its brace on the next line
        if m:
            pending_ns = ('ns', m.group(1)) if m.group(1) else ('anon', '')
    return found


defined = {}  # (namespace, name) -> (file, line) of its first definition
for dirpath, _, files in sorted(os.walk(src)):
    for f in sorted(files):
        if not f.endswith(SOURCE_EXT):
            continue
        p = os.path.join(dirpath, f)
        rel = os.path.relpath(p, root)
        for ns, name, n in namespace_scope_types(p):
            first = defined.setdefault((ns, name), (rel, n))
            if first[0] != rel:
                errors.append(f'{rel}:{n}: {ns + "::" if ns else ""}{name} is also defined in {first[0]}:{first[1]} '
                              f'(two definitions of one name in one namespace break the One Definition Rule: '
                              f'rename one, or give it its layer\'s namespace)')

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
