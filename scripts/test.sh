#!/usr/bin/env bash
# Sets up, builds and runs every test: C++ unit tests (GoogleTest), numpy reference tests and
# CLI integration tests, all through CTest, then (for release) the same tests built with ASan +
# UBSan and a ThreadSanitizer build of the concurrency tests. Exits non-zero if anything fails;
# CTest's summary line is printed last. Usage: scripts/test.sh [preset]   (release, debug or
# asan; TOKENFLOW_SKIP_SANITIZERS=1 runs the one preset only)
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
scripts/setup.sh
scripts/build.sh "$preset"
ctest --preset "$preset" -j "$(nproc)"
# Then the sanitizers: ASan + UBSan over every test, and ThreadSanitizer over the engine's and
# the thread pool's concurrency tests.
if [ "$preset" = release ] && [ "${TOKENFLOW_SKIP_SANITIZERS:-0}" != 1 ]; then
  scripts/build.sh asan
  ctest --preset asan -j "$(nproc)"
  cmake --preset tsan > /dev/null
  cmake --build --preset tsan
  ctest --preset tsan -j "$(nproc)"
fi
