#!/usr/bin/env bash
# Sets up, builds and runs every test, in stages (docs/testing.md says what each checks and what
# it costs):
#   release  the optimized build and every test: C++ unit tests (GoogleTest), the numpy reference
#            on every kernel table this CPU runs, tokenizers against their references, CLI and
#            server integration tests, deployment assets, short fuzz replays, the 1-minute soak
#   asan     ASan + LSan + UBSan (float-cast-overflow, _GLIBCXX_ASSERTIONS) over every test that
#            runs our code on inputs, with the long fuzz runs
#   tsan     ThreadSanitizer over core, the engine, serving and the running server
#   amx      the AMX kernel tables' tests and the numpy reference on them: fails (never skips)
#            where the CPU or the kernel cannot run AMX; for AMX hosts, not part of CI
#   debug    the tests in a debug build
# Usage: scripts/test.sh [all|release|asan|tsan|amx|debug]   (default all = release, asan, tsan:
# what CI runs). TOKENFLOW_SKIP_SANITIZERS=1 makes "all" the release stage alone.
# Each stage's time is printed at the end; a run of "all" longer than TOKENFLOW_CI_BUDGET_S
# (default 3600 s = 60 minutes, two thirds of CI's hard limit: hosts of one machine class differ
# by up to 1.6x, docs/testing.md) fails, so growth shows long before the wall. Sanitizer reports, skips outside tests/skips.txt and test failures all fail the stage.
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"
budget="${TOKENFLOW_CI_BUDGET_S:-3600}"
jobs="$(nproc)"
t_start=$(date +%s)
stage_log=()

report() {
  local rc=$?
  local total=$(($(date +%s) - t_start))
  echo
  echo "== scripts/test.sh $what: stage times =="
  for line in "${stage_log[@]}"; do echo "  $line"; done
  printf '  %-28s %5d s\n' "total" "$total"
  if [ "$rc" -eq 0 ] && [ "$what" = all ] && [ "$total" -gt "$budget" ]; then
    echo "scripts/test.sh: the whole run took ${total} s, over the ${budget} s budget" \
         "(TOKENFLOW_CI_BUDGET_S): CI's hard limit is 5400 s; find what grew (docs/testing.md)" >&2
    exit 1
  fi
  exit "$rc"
}
trap report EXIT

# Runs "$@" as the stage NAME, timing it.
stage() {
  local name=$1
  shift
  local t0
  t0=$(date +%s)
  echo "== $name =="
  "$@"
  stage_log+=("$(printf '%-28s %5d s' "$name" $(($(date +%s) - t0)))")
}

# The fuzz driver's mutation seed: from the commit, so each commit explores new inputs and a
# failing run reproduces (the driver prints it; TF_FUZZ_SEED=N reruns it).
if [ -z "${TF_FUZZ_SEED:-}" ] && head=$(git rev-parse --short=12 HEAD 2>/dev/null); then
  export TF_FUZZ_SEED=$((16#$head))
fi

build() { scripts/build.sh "$1"; }

# ctest for one preset, then the skips and timings check on its JUnit file.
run_tests() {
  local preset=$1
  shift
  local junit="$PWD/build/$preset/ctest-junit.xml"
  rm -rf "build/$preset/sanitizer-reports"
  local rc=0
  ctest --preset "$preset" -j "$jobs" --output-junit "$junit" "$@" || rc=$?
  python3 tests/check_ctest.py "$junit" || rc=1
  return "$rc"
}

# The tsan tree links the release tree's kernel-table objects:
# CMakeLists.txt, TOKENFLOW_KERNEL_OBJECTS_FROM.
release_objects() {
  cmake --preset release > /dev/null
  cmake --build --preset release -j "$jobs" --target tf_kernels
}

stage setup scripts/setup.sh
case "$what" in
  all)
    stage "release build" build release
    stage "release tests" run_tests release
    if [ "${TOKENFLOW_SKIP_SANITIZERS:-0}" != 1 ]; then
      stage "asan build" build asan
      stage "asan tests" run_tests asan
      stage "tsan build" build tsan
      stage "tsan tests" run_tests tsan
    fi
    ;;
  release | debug)
    stage "$what build" build "$what"
    stage "$what tests" run_tests "$what"
    ;;
  asan)
    stage "asan build" build asan
    stage "asan tests" run_tests asan
    ;;
  tsan)
    stage "release objects" release_objects
    stage "tsan build" build tsan
    stage "tsan tests" run_tests tsan
    ;;
  amx)
    # Every AMX test must run: a skip here is a failure (TF_REQUIRE_AMX).
    if ! grep -qw amx_tile /proc/cpuinfo; then
      echo "scripts/test.sh amx: this CPU has no AMX (no amx_tile in /proc/cpuinfo): run it on an AMX host" >&2
      exit 1
    fi
    stage "release build" build release
    export TF_REQUIRE_AMX=1
    stage "amx tests" ctest --preset release -j "$jobs" \
      -R '^(Weights\.Tile.*|Every/KernelTable\.IsTestedWhereTheCpuRunsIt/amx.*|reference\.numpy\.native)$'
    ;;
  *)
    echo "usage: scripts/test.sh [all|release|asan|tsan|amx|debug]" >&2
    exit 2
    ;;
esac
