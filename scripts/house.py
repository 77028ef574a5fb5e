#!/usr/bin/env python3
"""Reports the house rules' size limits: source files over FILE_MAX lines and functions over
FN_MAX lines, outside tests (tests/, benches/, `#[cfg(test)]` modules) and generated code.
Rust (`*.rs`) and the BPF programs' C (`*.bpf.c` and the `*.h` they include) are measured
alike: a C function runs from the first line of its declaration (attributes such as
`SEC("xdp")` included) to its closing brace; struct, enum and map definitions, initialisers
and macros are not functions.

Exits 1 when anything is over, so CI keeps the layout readable. A function that must be
longer carries `// house: long because ...` on the line above its first line (`fn`, or the
C declaration's), which the report accepts (the reason is the point: it shows in review).

Usage: python3 scripts/house.py [ROOT]
"""

import os
import re
import sys

FILE_MAX = 800
FN_MAX = 80
FN_RE = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+\"C\"\s+)?fn\s+(\w+)")
SKIP_DIRS = {"target", ".git", "fuzz", "tests", "benches", "node_modules"}


C_NOT_NAMES = {"if", "for", "while", "switch", "return", "sizeof", "SEC", "__attribute__"}


def strip(line, state, c=False):
    """Removes string, char and comment contents from one line; `state` carries an open
    block comment or string across lines. Returns the code with only braces that count.
    With `c`, the line is C: no raw strings, and preprocessor lines (with their `\`
    continuations) hold no code."""
    if c:
        cont = state.get("pp", False)
        if cont or (not state["block"] and line.lstrip().startswith("#")):
            state["pp"] = line.rstrip().endswith("\\")
            return ""
    out = []
    i = 0
    n = len(line)
    while i < n:
        c = line[i]
        if state["block"]:
            if line.startswith("*/", i):
                state["block"] -= 1
                i += 2
            elif line.startswith("/*", i):
                state["block"] += 1
                i += 2
            else:
                i += 1
            continue
        if state["str"]:
            if c == "\\" and not state["raw"]:
                i += 2
                continue
            if c == '"':
                if state["raw"]:
                    hashes = state["raw"] - 1
                    if line[i + 1 : i + 1 + hashes] == "#" * hashes:
                        state["str"] = False
                        i += 1 + hashes
                        continue
                else:
                    state["str"] = False
            i += 1
            continue
        if line.startswith("//", i):
            break
        if line.startswith("/*", i):
            state["block"] = 1
            i += 2
            continue
        m = None if c else re.match(r'b?r(#*)"', line[i:])
        if m and (i == 0 or not (line[i - 1].isalnum() or line[i - 1] == "_")):
            state["str"] = True
            state["raw"] = len(m.group(1)) + 1
            i += len(m.group(0))
            continue
        if c == '"':
            state["str"] = True
            state["raw"] = 0
            i += 1
            continue
        if c == "'":
            m = re.match(r"'(\\.|\\x[0-9a-fA-F]{2}|\\u\{[0-9a-fA-F]+\}|[^\\'])'", line[i:])
            if m:
                i += len(m.group(0))
                continue
        out.append(c)
        i += 1
    return "".join(out)


def scan(path):
    """Returns (non-test lines, [(name, start, length, excused)]) for a file's functions
    outside `#[cfg(test)]` items."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    state = {"block": 0, "str": False, "raw": 0}
    code = [strip(l, state) for l in lines]
    fns = []
    test_lines = 0
    i = 0
    while i < len(lines):
        if re.match(r"^\s*#\[cfg\(test\)\]", lines[i]):
            end = block_end(code, i)
            if end is None:
                end = i + 1
            test_lines += end - i + 1
            i = end + 1
            continue
        m = FN_RE.match(code[i])
        if m:
            end = block_end(code, i)
            if end is not None:
                excused = i > 0 and "house: long because" in lines[i - 1]
                fns.append((m.group(7), i + 1, end - i + 1, excused))
        i += 1
    return len(lines) - test_lines, fns


def scan_c(path):
    """Returns (lines, [(name, start, length, excused)]) for a C file's function
    definitions: at brace depth 0, a `{` whose declaration (the code since the last `;` or
    `}` at depth 0) names a parameter list and assigns nothing."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    state = {"block": 0, "str": False, "raw": 0}
    code = [strip(l, state, c=True) for l in lines]
    fns = []
    depth = 0
    decl, decl_start = [], None
    opened = None
    for ln, text in enumerate(code):
        for ch in text + "\n":
            if depth:
                depth += {"{": 1, "}": -1}.get(ch, 0)
                if depth == 0:
                    name, start = opened
                    if name:
                        excused = start > 0 and "house: long because" in lines[start - 1]
                        fns.append((name, start + 1, ln - start + 1, excused))
                    decl, decl_start = [], None
            elif ch == "{":
                depth = 1
                opened = (c_function_name("".join(decl)), decl_start if decl_start is not None else ln)
            elif ch in ";}":
                decl, decl_start = [], None
            else:
                if decl_start is None and not ch.isspace():
                    decl_start = ln
                decl.append(ch)
    return len(lines), fns


def c_function_name(decl):
    """The function a C declaration defines (the identifier before its last parameter list
    at parenthesis depth 0), or None: a struct, enum or union, or an initialiser."""
    if "=" in decl:
        return None
    name, depth = None, 0
    for m in re.finditer(r"[A-Za-z_]\w*|[()]", decl):
        tok = m.group(0)
        if tok == "(":
            if depth == 0:
                before = re.search(r"([A-Za-z_]\w*)\s*$", decl[: m.start()])
                word = before.group(1) if before else None
                if word not in C_NOT_NAMES:
                    name = word
            depth += 1
        elif tok == ")":
            depth -= 1
    return name


def block_end(code, start):
    """The line on which the first `{` block opened at or after `start` closes; None for
    a declaration with no body (`fn f();`)."""
    depth = 0
    opened = False
    for j in range(start, len(code)):
        for c in code[j]:
            if c == "{":
                depth += 1
                opened = True
            elif c == "}":
                depth -= 1
                if opened and depth == 0:
                    return j
            elif c == ";" and not opened and depth == 0:
                return None
    return len(code) - 1


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    over = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("target"))
        for name in sorted(filenames):
            c = name.endswith(".bpf.c") or name.endswith(".h")
            rust = name.endswith(".rs") and name != "tests.rs" and not name.endswith("_tests.rs")
            if not (c or rust):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            total, fns = scan_c(path) if c else scan(path)
            if total > FILE_MAX:
                over.append(f"{rel}: {total} lines outside tests (limit {FILE_MAX})")
            for fn, line, length, excused in fns:
                if length > FN_MAX and not excused:
                    over.append(f"{rel}:{line}: fn {fn} is {length} lines (limit {FN_MAX})")
    for o in over:
        print(o)
    print(f"house: {len(over)} over the limits")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
