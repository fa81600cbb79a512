#!/usr/bin/env bash
# Sets up, builds and runs every test: C++ unit tests (GoogleTest), numpy reference tests and
# CLI integration tests, all through CTest, then (for release) a ThreadSanitizer build of the
# concurrency tests. Exits non-zero if anything fails; CTest's summary line is printed last.
# Usage: scripts/test.sh [preset]   (release, debug or asan; TOKENFLOW_SKIP_SANITIZERS=1 runs
# the one preset only)
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
scripts/setup.sh
scripts/build.sh "$preset"
ctest --preset "$preset" -j "$(nproc)"
# Then ThreadSanitizer over the engine's and the thread pool's concurrency tests (a few
# minutes). ASan + UBSan over every test is `scripts/test.sh asan` (a full ASan build takes
# ~15 minutes on two cores, too long to add to every CI run).
if [ "$preset" = release ] && [ "${TOKENFLOW_SKIP_SANITIZERS:-0}" != 1 ]; then
  cmake --preset tsan > /dev/null
  cmake --build --preset tsan
  ctest --preset tsan -j "$(nproc)"
fi
