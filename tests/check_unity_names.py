#!/usr/bin/env python3
"""Guards the unity builds (CMakeLists.txt: tf_serving, the tokenflow CLI). There a target's .cc
files are compiled several to a translation unit, so a function in one file's anonymous
namespace sees the functions of the files before it. Two that share a name are an error only
when their signatures are the same; with different parameters they are overloads, and a call
may silently take the other file's function (it happened: responses_api.cc's bad(message,
param) calls resolved to tool_calls.cc's bad(const char*, message) and swapped the error's
message and param). This fails when a function defined in one file's anonymous namespace has
a name that another file of the same group defines (anonymous or not).

Usage: check_unity_names.py --group FILE... [--group FILE...]
Reads definitions as clang-format lays them out: at the start of a line, after comments and
strings are removed. Exits 1 naming each clash.
"""

import argparse
import re
import sys

FUNC = re.compile(
    r"^(?:template\s*<[^>]*>\s*)?(?:\[\[[\w:]+\]\]\s*)?(?:(?:static|inline|constexpr|extern)\s+)*"
    r"(?!return\b|else\b|if\b|for\b|while\b|switch\b|using\b|namespace\b|struct\b|class\b|"
    r"enum\b|case\b|delete\b|new\b)[A-Za-z_][\w:<>,\s\*&]*?[\s\*&>]([A-Za-z_]\w*)\s*\(")


def strip(text):
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r'R"(\w*)\((.*?)\)\1"', '""', text, flags=re.S)
    text = re.sub(r'"(\\.|[^"\\\n])*"', '""', text)
    return re.sub(r"'(\\.|[^'\\\n])*'", "''", text)


def definitions(path):
    """(names defined in an anonymous namespace, names defined elsewhere) of one file."""
    anon, named = set(), set()
    depth, anon_depth = 0, None
    with open(path, encoding="utf-8", errors="replace") as f:
        text = strip(f.read())
    for line in text.split("\n"):
        if not line.startswith((" ", "\t", "#")):
            m = FUNC.match(line)
            if m:
                (anon if anon_depth is not None else named).add(m.group(1))
        if anon_depth is None and re.search(r"\bnamespace\s*\{", line):
            anon_depth = depth
        depth += line.count("{") - line.count("}")
        if anon_depth is not None and depth <= anon_depth:
            anon_depth = None
    return anon, named


def clashes(files):
    defs = {f: definitions(f) for f in files}
    out = []
    for f, (anon, _) in defs.items():
        for name in sorted(anon):
            others = [g for g, (a, n) in defs.items() if g != f and (name in a or name in n)]
            if others:
                out.append(f"{f}: '{name}' (anonymous namespace) is also defined in "
                           f"{', '.join(others)}: rename one, a unity build may call the other")
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--group", nargs="+", action="append", required=True, metavar="FILE")
    args = p.parse_args()
    problems = [c for group in args.group for c in clashes(group)]
    for c in problems:
        print(c)
    n = sum(len(g) for g in args.group)
    print(f"{n} files in {len(args.group)} unity group(s): {len(problems)} clash(es)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
