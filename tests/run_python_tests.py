#!/usr/bin/env python3
"""Runs Python unittest files as one CTest test, so that nothing they see goes unnoticed.

Usage: run_python_tests.py --name CTEST_NAME --dir DIR [--requires-cpu FLAG]... PATTERN...

- Every case that was skipped is printed as a `SKIP: <test id> -- <reason>` line;
  tests/check_ctest.py reads them from CTest's JUnit file and fails the stage on any skip that
  tests/skips.txt does not allow. When every case skipped, the exit status is 77, which CTest
  (SKIP_RETURN_CODE) shows as "Skipped" in its summary, as it does a skipped gtest.
- --requires-cpu FLAG: a CPU flag of /proc/cpuinfo (e.g. avx_vnni) that the run needs; on a CPU
  without it the whole run is one skip (e.g. the numpy reference on a kernel table this CPU
  cannot run: TOKENFLOW_ISA would silently pick a lower table and pass for the wrong reason).
- A run that found no test fails: a pattern that matches nothing must not pass.
- Under a sanitizer build (TF_SANITIZER_REPORTS set), every process the tests start writes its
  ASan / LSan / UBSan / TSan reports into TF_SANITIZER_REPORTS/CTEST_NAME/ (log_path is added to
  each *SAN_OPTIONS the children inherit); any report there fails this test and is printed, so a
  use-after-free at a test server's shutdown fails the test that started that server even when
  the test never looked at the server's stderr.
"""

import argparse
import os
import shutil
import sys
import unittest

SKIP_STATUS = 77
REPORT_LIMIT = 20000  # characters of each sanitizer report printed


def route_sanitizer_reports(name):
    root = os.environ.get("TF_SANITIZER_REPORTS")
    if not root:
        return None
    where = os.path.join(root, name)
    shutil.rmtree(where, ignore_errors=True)
    os.makedirs(where)
    for var, stem in (("ASAN_OPTIONS", "asan"), ("LSAN_OPTIONS", "lsan"),
                      ("UBSAN_OPTIONS", "ubsan"), ("TSAN_OPTIONS", "tsan")):
        opts = [o for o in os.environ.get(var, "").split(":") if o and not o.startswith("log_path=")]
        opts.append("log_path=" + os.path.join(where, stem))
        os.environ[var] = ":".join(opts)
    return where


def sanitizer_reports(where):
    if not where:
        return []
    found = []
    for entry in sorted(os.listdir(where)):
        path = os.path.join(where, entry)
        if os.path.isfile(path) and os.path.getsize(path) > 0:
            with open(path, errors="replace") as f:
                found.append((entry, f.read(REPORT_LIMIT)))
    return found


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True, help="the CTest test's name")
    ap.add_argument("--dir", required=True, help="the folder the test files are in")
    ap.add_argument("--requires-cpu", action="append", default=[], metavar="FLAG")
    ap.add_argument("patterns", nargs="+", help="file name patterns, e.g. test_*.py")
    args = ap.parse_args()

    missing = [f for f in args.requires_cpu if f not in cpu_flags()]
    if missing:
        print("SKIP: %s -- the CPU lacks %s" % (args.name, " ".join(missing)))
        return SKIP_STATUS

    reports_dir = route_sanitizer_reports(args.name)
    sys.path.insert(0, args.dir)
    suite = unittest.TestSuite()
    loader = unittest.TestLoader()
    for pattern in args.patterns:
        suite.addTests(loader.discover(args.dir, pattern=pattern, top_level_dir=args.dir))
    if loader.errors:
        for e in loader.errors:
            print(e, file=sys.stderr)
        return 1
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stderr).run(suite)
    sys.stderr.flush()

    skipped_cases = 0
    for test, reason in result.skipped:
        if isinstance(test, unittest.TestCase) and not isinstance(test, unittest.case._SubTest):
            skipped_cases += 1
        test_id = test.id() if hasattr(test, "id") else str(test)
        print("SKIP: %s -- %s" % (test_id, " ".join(str(reason).split())))
    reports = sanitizer_reports(reports_dir)
    for entry, text in reports:
        print("=== sanitizer report %s from a process started by %s ===" % (entry, args.name))
        print(text)
    sys.stdout.flush()

    if reports:
        print("FAIL: %d sanitizer report(s) from processes started by %s (in %s)"
              % (len(reports), args.name, reports_dir))
        return 1
    if not result.wasSuccessful():
        return 1
    ran = result.testsRun - skipped_cases
    if result.testsRun == 0 and not result.skipped:
        print("FAIL: no test found in %s matching %s" % (args.dir, " ".join(args.patterns)))
        return 1
    if ran == 0:
        return SKIP_STATUS
    return 0


if __name__ == "__main__":
    sys.exit(main())
