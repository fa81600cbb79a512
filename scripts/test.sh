#!/usr/bin/env bash
# Sets up, builds and runs every test: C++ unit tests (GoogleTest), numpy reference tests and
# CLI integration tests, all through CTest. Exits non-zero if anything fails; CTest's summary
# line is printed last. Usage: scripts/test.sh [preset]   (release, debug or asan)
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
scripts/setup.sh
scripts/build.sh "$preset"
ctest --preset "$preset" -j "$(nproc)"
