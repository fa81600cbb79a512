#!/usr/bin/env bash
# Long, coverage-guided fuzzing with libFuzzer (docs/fuzzing.md): builds the fuzz preset (clang;
# every library a target reaches instrumented for coverage, ASan and UBSan), runs each target for
# MINUTES on a working corpus seeded from tests/fuzz/corpus/<target>/, then minimizes what it
# found back into the tree (-merge=1: only inputs that add coverage), so that CI's replays start
# from it. Crashes are left as crash-*/leak-*/timeout-* files in build/fuzz/findings/<target>/;
# the script exits non-zero if any target found one.
# Usage: scripts/fuzz.sh [-m MINUTES] [-j JOBS] [TARGET...]   (default: 30 minutes, every target)
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=30
jobs=1
while getopts "m:j:" opt; do
  case "$opt" in
    m) minutes=$OPTARG ;;
    j) jobs=$OPTARG ;;
    *) echo "usage: scripts/fuzz.sh [-m MINUTES] [-j JOBS] [TARGET...]" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))

scripts/setup.sh
# clang and its runtimes (libFuzzer, the sanitizers): Debian packages, only for this script.
if ! command -v clang++ > /dev/null || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a > /dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    clang libclang-rt-dev > /dev/null
fi
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(ls tests/fuzz/fuzz_*.cc | sed 's|.*/fuzz_\(.*\)\.cc|\1|' | grep -v '^driver$')
fi
# Two of these may run side by side (one per core): the configure and build steps take turns.
mkdir -p build
(
  flock 9
  cmake --preset fuzz > /dev/null
  cmake --build --preset fuzz -j "$(nproc)" --target "${targets[@]/#/fuzz_}"
) 9> build/.fuzz-build.lock

status=0
for t in "${targets[@]}"; do
  bin="build/fuzz/tests/fuzz/fuzz_$t"
  seeds="tests/fuzz/corpus/$t"
  work="build/fuzz/corpus/$t"
  findings="build/fuzz/findings/$t"
  mkdir -p "$work" "$findings" "$seeds"
  cp -n "$seeds"/* "$work"/ 2> /dev/null || true
  before=$(find "$seeds" -type f | wc -l)
  echo "== $t: $minutes min, $jobs job(s) =="
  # -rss_limit_mb: the parsers must refuse huge inputs before allocating them.
  if ! (cd "$findings" && "$OLDPWD/$bin" "$OLDPWD/$work" -max_total_time=$((minutes * 60)) \
          -jobs="$jobs" -workers="$jobs" -rss_limit_mb=4096 -timeout=30 -max_len=1048576 \
          -print_final_stats=1 > "run.log" 2>&1); then
    echo "$t: FOUND A FAILURE, see $findings (run.log and crash-* files)"
    status=1
  fi
  # Minimize into the tree: keep only inputs that add coverage to what is there.
  "$bin" -merge=1 "$seeds" "$work" > "$findings/merge.log" 2>&1 || true
  after=$(find "$seeds" -type f | wc -l)
  grep -h "stat::number_of_executed_units\|cov:" "$findings"/*.log 2> /dev/null | tail -2 || true
  echo "$t: corpus $before -> $after files"
done
exit "$status"
