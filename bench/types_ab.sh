#!/usr/bin/env bash
# Two binaries side by side per weight type (issue 22): decode tok/s of one sequence (16 prompt
# tokens, 128 generated) and prefill tok/s of a 512-token prompt (from its time to first token),
# RUNS interleaved runs, medians, new / old ratios. Types are GGUF types of
# bench/make_bench_gguf.py, or int8 / q4 / bf16 (tokenflow's own, packed at load from the f32 file).
# TOKENFLOW_ISA in the environment picks the kernel table for both.
# Usage: OLD=/path/to/old/tokenflow bench/types_ab.sh [RUNS] [SHAPE] [TYPES...]
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"; shape="${2:-llama110m}"; shift $(($# < 2 ? $# : 2))
types=("$@"); [ ${#types[@]} -gt 0 ] || types=(f32 q8_0 q4_0 q4_k q6_k int8 q4)
. bench/common.sh
old="${OLD:?set OLD to the binary to compare against}"
declare -A dec pre
model_args() {  # TYPE -> bench flags for the model
  case "$1" in
    int8|q4|bf16) echo "-m $(bench_gguf "$shape" f32) --dtype $1" ;;
    *) echo "-m $(bench_gguf "$shape" "$1")" ;;
  esac
}
for t in "${types[@]}"; do model_args "$t" > /dev/null; done
for ((r = 0; r < runs; r++)); do
  for t in "${types[@]}"; do
    for b in "$bin" "$old"; do
      out=$($b bench --offline $(model_args "$t") --num-prompts 2 --concurrency 1 --input-len 16 --output-len 128)
      dec[$b/$t]+="$(awk '/^output tok\/s/ {print $3}' <<<"$out") "
      out=$($b bench --offline $(model_args "$t") --num-prompts 2 --concurrency 1 --input-len 512 --output-len 1)
      pre[$b/$t]+="$(awk '/^ttft ms/ {print 512000 / $4}' <<<"$out") "
    done
  done
done
med() { tr ' ' '\n' <<<"$1" | grep . | median; }
echo "| type | decode tok/s new | old | new / old | prefill 512 tok/s new | old | new / old |"
echo "|---|---|---|---|---|---|---|"
for t in "${types[@]}"; do
  dn=$(med "${dec[$bin/$t]}"); do_=$(med "${dec[$old/$t]}")
  pn=$(med "${pre[$bin/$t]}"); po=$(med "${pre[$old/$t]}")
  printf "| %s | %s | %s | %.2f | %.0f | %.0f | %.2f |\n" "$t" "$dn" "$do_" \
    "$(echo "$dn / $do_" | bc -l)" "$pn" "$po" "$(echo "$pn / $po" | bc -l)"
done
