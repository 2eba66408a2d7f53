#!/usr/bin/env python3
"""Lists the longest C++ functions in the given files or folders.

    server/function_lengths.py [--max N] [--top K] PATH...

A function is a brace block that follows a parameter list (`)` with
optional qualifiers, an initializer list or a trailing return type) at
namespace or class scope; lambdas and blocks inside it count towards it.
Its length is from the first line of its signature to its closing brace.
With --max, exits 1 listing every function longer than N lines.

It reads C++ as text (comments and literals stripped), which is enough for
this project's style; it is not a parser.
"""

import argparse
import os
import re
import sys

_CONTAINER = re.compile(r"\b(namespace|class|struct|union|enum)\b[^()]*$|\bextern\s*$")
_AFTER_PARAMS = re.compile(
    r"\)\s*(const|override|final|noexcept|mutable|&|&&|\s|->\s*[\w:<>,\s*&]+|"
    r"ABSL_\w+\s*\([^()]*\)|\w+\s*\([^()]*\))*$",
    re.S,
)


def _strip(text):
    """Blanks comments and string/char literals, keeping newlines."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            k = text.find("(", i)
            delim = ")" + text[i + 2 : k] + '"'
            j = text.find(delim, k)
            j = n if j < 0 else j + len(delim)
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # digit separator 1'000
                out.append(c)
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _functions(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        text = _strip(f.read())
    # Preprocessor lines are not code here.
    text = re.sub(r"^[ \t]*#.*$", "", text, flags=re.M)
    stack = []  # (kind, start offset of the signature, name)
    last = 0  # end of the previous statement or block boundary
    found = []
    for i, c in enumerate(text):
        if c in ";":
            if not stack or stack[-1][0] == "container":
                last = i + 1
        elif c == "{":
            enclosing = stack[-1][0] if stack else "container"
            head = text[last:i]
            if enclosing != "container":
                stack.append(("block", i, ""))
                continue
            stripped = head.strip()
            if _CONTAINER.search(stripped) or stripped.endswith("=") or not stripped:
                stack.append(("container" if _CONTAINER.search(stripped) else "block", i, ""))
            elif _AFTER_PARAMS.search(stripped) or re.search(r"\)\s*:\s*[\w:]+\s*[({]", stripped):
                start = last + (len(head) - len(head.lstrip()))
                name = re.sub(r"\s+", " ", stripped.split("(")[0]).split(" ")[-1]
                stack.append(("function", start, name))
            else:
                stack.append(("block", i, ""))
            last = i + 1
        elif c == "}":
            if not stack:
                continue
            kind, start, name = stack.pop()
            if kind == "function":
                first = text.count("\n", 0, start) + 1
                end = text.count("\n", 0, i) + 1
                found.append((end - first + 1, name, path, first))
            if not stack or stack[-1][0] == "container":
                last = i + 1
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max", type=int, default=0, help="fail listing functions longer than this")
    ap.add_argument("--top", type=int, default=10, help="how many of the longest to print")
    ap.add_argument("paths", nargs="+")
    args = ap.parse_args()
    files = []
    for p in args.paths:
        if os.path.isdir(p):
            for root, _, names in os.walk(p):
                files += [os.path.join(root, n) for n in names if n.endswith((".cc", ".h"))]
        else:
            files.append(p)
    found = []
    for f in sorted(files):
        found += _functions(f)
    found.sort(reverse=True)
    for length, name, path, line in found[: args.top]:
        print(f"{length:5d}  {name}  {path}:{line}")
    if args.max:
        over = [f for f in found if f[0] > args.max]
        if over:
            print(f"{len(over)} functions are longer than {args.max} lines:", file=sys.stderr)
            for length, name, path, line in over:
                print(f"  {path}:{line} {name}: {length} lines", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
