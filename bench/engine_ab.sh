#!/usr/bin/env bash
# Two builds of tokenflow side by side on the engine's step loop (offline, no server): output
# tok/s of one sequence, 32 concurrent sequences and 64 concurrent ones, runs interleaved (A B A
# B ...) so that machine noise hits both alike; medians of RUNS and the B/A ratio. For checking
# that an engine change does not cost throughput. stories260K makes the step's own overhead
# (scheduling, sampling, streaming) most of the time; pass a bigger model to weigh the math in.
# Usage: bench/engine_ab.sh OLD_BIN NEW_BIN [RUNS] [MODEL]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/common.sh
a="$1"; b="$2"; runs="${3:-5}"; model="${4:-../shared/models/stories260K/stories260K.bin}"
for c in 1 32 64; do
  n=$(( c == 1 ? 8 : 2 * c ))
  args=(bench --offline -m "$model" --num-prompts $n --concurrency $c --input-len 32 --output-len 128
        --threads 2)
  ra=(); rb=()
  for ((r = 0; r < runs; r++)); do
    ra+=("$("$a" "${args[@]}" | field "output tok/s" 3)")
    rb+=("$("$b" "${args[@]}" | field "output tok/s" 3)")
  done
  ma=$(printf '%s\n' "${ra[@]}" | median); mb=$(printf '%s\n' "${rb[@]}" | median)
  echo "concurrency $c: A $ma tok/s, B $mb tok/s, B/A $(awk -v a="$ma" -v b="$mb" 'BEGIN {printf "%.3f", b / a}')"
done
