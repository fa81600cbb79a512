#!/usr/bin/env bash
# Decode under CPU contention (issue 22): tok/s of one sequence (16 prompt tokens, 128 generated)
# with 0, 1 and 2 busy processes beside it (shell loops, one core each), RUNS interleaved runs,
# medians; BIN=... compares another binary in the same runs (e.g. the previous thread pool).
# Usage: bench/contention_bench.sh [RUNS] [MODEL] [extra tokenflow bench flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"; model="${2:-}"; shift $(($# < 2 ? $# : 2))
. bench/common.sh
[ -n "$model" ] || model=$(bench_gguf llama110m q4_0)
bins=("$bin"); [ -n "${BIN:-}" ] && bins+=("$BIN")
declare -A tok
hogs=()
stop_hogs() { for p in "${hogs[@]}"; do kill "$p" 2>/dev/null || true; done; hogs=(); }
trap stop_hogs EXIT
for ((r = 0; r < runs; r++)); do
  for busy in 0 1 2; do
    for ((h = 0; h < busy; h++)); do sh -c 'while :; do :; done' & hogs+=($!); done
    for b in "${bins[@]}"; do
      out=$($b bench --offline -m "$model" --num-prompts 2 --concurrency 1 --input-len 16 \
              --output-len 128 "$@")
      tok[$b/$busy]+="$(awk '/^output tok\/s/ {print $3}' <<<"$out") "
    done
    stop_hogs
  done
done
med() { tr ' ' '\n' <<<"$1" | grep . | median; }
echo "| binary | alone tok/s | 1 busy | vs alone | 2 busy | vs alone |"
echo "|---|---|---|---|---|---|"
for b in "${bins[@]}"; do
  a=$(med "${tok[$b/0]}"); o=$(med "${tok[$b/1]}"); t=$(med "${tok[$b/2]}")
  printf "| %s | %s | %s | %.2f | %s | %.2f |\n" "$b" "$a" "$o" "$(echo "$o / $a" | bc -l)" \
    "$t" "$(echo "$t / $a" | bc -l)"
done
