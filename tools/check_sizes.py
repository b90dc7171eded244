#!/usr/bin/env python3
"""check_sizes: no source file over 800 lines and no function over 120 lines in src/ and apps/.

The house rule (DEVELOPERS.md "Style"): one small file pair per concern, no file over ~800 lines,
no function over ~120 lines. A function is a brace block opened right after a parameter list ")"
(with const / noexcept / override / a trailing return type / a constructor's initializer list
between) at namespace or class scope; its length runs from the line of its name to its closing
brace, lambdas inside counted with it. Comments, strings and character literals are blanked before
the scan. Exits 1 naming each offender as file:line. Usage: check_sizes.py [PROJECT_ROOT]
"""
import os
import re
import sys

MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 120

root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..'))


def blank_comments_and_strings(text):
    """The text with comments, string and character literals replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i))
            i = j
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', text[i:j]))
            i = j
        elif text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == '_')):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = ')' + m.group(1) + '"'
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r'[^\n]', ' ', text[i:j]))
            i = j
        elif c in '"\'':
            if c == "'" and i > 0 and text[i - 1].isalnum():  # a digit separator: 1'000'000
                out.append(' ')
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != '\n':
                j += 2 if text[j] == '\\' else 1
            j = min(j + 1, n)
            out.append(re.sub(r'[^\n]', ' ', text[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return ''.join(out)


FUNCTION_TAIL = re.compile(
    r'\)\s*(const\s*)?(noexcept(\([^)]*\))?\s*)?(override\s*|final\s*)*(->\s*[\w:<>,\s*&]+)?\s*$')
INIT_LIST = re.compile(r'\)\s*(noexcept\s*)?:\s*[\w:]+\s*[({]', re.S)


def kind_of(head):
    """What a brace opens, from the text since the previous ; { or } (its head)."""
    h = ' '.join(head.split())
    if re.search(r'(^|\s)namespace(\s|$)', h) or h.startswith('extern "C"'):
        return 'namespace'
    if re.search(r'(^|\s)(class|struct|union)\s', h) and '(' not in h and '=' not in h:
        return 'class'
    if re.search(r'(^|\s)enum(\s|$)', h):
        return 'other'
    if FUNCTION_TAIL.search(h) or INIT_LIST.search(h):
        return 'function'
    return 'other'


def check_file(path, rel, errors):
    with open(path, encoding='utf-8', errors='replace') as f:
        text = f.read()
    lines = text.count('\n') + (0 if text.endswith('\n') else 1)
    if lines > MAX_FILE_LINES:
        errors.append(f'{rel}:1: {lines} lines (at most {MAX_FILE_LINES})')
    code = blank_comments_and_strings(text)
    # Preprocessor lines (and their continuations) are not code to measure.
    code = re.sub(r'^[ \t]*#(?:[^\n]*\\\n)*[^\n]*', lambda m: re.sub(r'[^\n]', ' ', m.group(0)), code, flags=re.M)
    code = re.sub(r'^[ \t]*(public|private|protected)\s*:', lambda m: ' ' * len(m.group(0)), code, flags=re.M)
    stack = []  # (kind, start line)
    head_start = 0
    line = 1
    for i, c in enumerate(code):
        if c == '\n':
            line += 1
        elif c == '{':
            enclosing = stack[-1][0] if stack else 'namespace'
            head = code[head_start:i]
            kind = kind_of(head) if enclosing in ('namespace', 'class') else 'inner'
            # A constructor's initializer list holds braces of its own: `: a_{x}, b_(y) {`.
            if enclosing in ('namespace', 'class') and kind == 'other' and INIT_LIST.search(' '.join(head.split())):
                kind = 'function'
            first = line
            if kind == 'function':
                stripped = head.lstrip()
                first = line - head[len(head) - len(stripped):].count('\n')
            stack.append((kind, first))
            head_start = i + 1
        elif c == '}':
            if stack:
                kind, first = stack.pop()
                if kind == 'function' and line - first + 1 > MAX_FUNCTION_LINES:
                    errors.append(f'{rel}:{first}: a function of {line - first + 1} lines (at most {MAX_FUNCTION_LINES})')
            head_start = i + 1
        elif c == ';':
            if not stack or stack[-1][0] in ('namespace', 'class'):
                head_start = i + 1


def main():
    errors = []
    for top in ('src', 'apps'):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if name.endswith(('.h', '.cpp', '.cu', '.cuh')):
                    path = os.path.join(dirpath, name)
                    check_file(path, os.path.relpath(path, root), errors)
    for e in errors:
        print(e)
    print(f'check_sizes: {len(errors)} problem(s)')
    return 1 if errors else 0


if __name__ == '__main__':
    sys.exit(main())
