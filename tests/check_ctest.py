#!/usr/bin/env python3
"""Reads CTest's JUnit file of one stage (ctest --output-junit) and fails on what a green CTest
summary hides: any skip that tests/skips.txt does not allow, gtest or Python. Also prints the
stage's skips with their reasons and its slowest tests (docs/testing.md uses these figures).

Usage: check_ctest.py JUNIT_XML [--allow tests/skips.txt] [--slowest N]

A skip is named "CTEST_NAME" (a gtest, or a Python test whose every case skipped) or
"CTEST_NAME: UNITTEST_ID" (one Python case, from run_python_tests.py's SKIP lines); each line of
the allowlist is `NAME_REGEX :: REASON_REGEX :: why this skip is acceptable`, both regexes
matched in full (re.fullmatch) against the name and the skip's reason.
"""

import argparse
import os
import re
import sys
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))


def load_allowlist(path):
    rules = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = [p.strip() for p in line.split("::")]
            if len(parts) != 3 or not parts[2]:
                raise SystemExit("%s:%d: want NAME_REGEX :: REASON_REGEX :: why" % (path, n))
            rules.append((re.compile(parts[0]), re.compile(parts[1]), parts[2]))
    return rules


def gtest_skip_reason(out):
    """The message between gtest's "Skipped" line and its "[  SKIPPED ]" line."""
    m = re.search(r": Skipped\n(.*?)\n\[  SKIPPED \]", out, re.S)
    return " ".join(m.group(1).split()) if m else "(no reason given)"


def skips_of(case):
    name = case.get("name", "").split("  # GetParam()")[0].strip()
    out_el = case.find("system-out")
    out = out_el.text or "" if out_el is not None else ""
    found = []
    for line in out.splitlines():
        m = re.match(r"SKIP: (\S+) -- (.*)$", line)
        if m:  # a Python case (or the whole run) that run_python_tests.py reported skipped
            ident = m.group(1)
            found.append((name if ident == name else "%s: %s" % (name, ident), m.group(2)))
    if case.find("skipped") is not None and not found:
        found.append((name, gtest_skip_reason(out)))
    return found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("junit")
    ap.add_argument("--allow", default=os.path.join(HERE, "skips.txt"))
    ap.add_argument("--slowest", type=int, default=10)
    args = ap.parse_args()
    rules = load_allowlist(args.allow)
    root = ET.parse(args.junit).getroot()
    cases = root.iter("testcase")
    timed, allowed, refused = [], [], []
    for case in cases:
        timed.append((float(case.get("time", "0")), case.get("name", "").split("  # ")[0]))
        for name, reason in skips_of(case):
            why = next((w for n, r, w in rules if n.fullmatch(name) and r.fullmatch(reason)), None)
            (allowed if why else refused).append((name, reason, why))
    timed.sort(reverse=True)
    print("slowest tests:")
    for t, name in timed[:args.slowest]:
        print("  %8.1f s  %s" % (t, name))
    print("total test time %.0f s over %d tests" % (sum(t for t, _ in timed), len(timed)))
    for name, reason, why in allowed:
        print("skipped (allowed: %s): %s -- %s" % (why, name, reason))
    for name, reason, _ in refused:
        print("SKIPPED, NOT ALLOWED by tests/skips.txt: %s -- %s" % (name, reason))
    if refused:
        print("%d skip(s) not in the allowlist: a skipped test checks nothing; make it run "
              "here, or allow it in tests/skips.txt with the reason it cannot" % len(refused))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
