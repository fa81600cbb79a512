#!/usr/bin/env bash
# A few rows per step (issue 56): the decode step of 2 and 4 sequences against one, per weight
# dtype, on the 1.1B shape at a short context (attention a small part of the step), so that the
# ratio is what a small decode batch or a speculative verification of 4 rows costs against one
# token. ITL p50 of each run; runs interleaved (1, 2, 4, 1, 2, 4, ...) so that machine noise
# hits all alike; medians of RUNS. Target: 4 rows <= 1.15x one row.
# Usage: bench/small_batch_bench.sh [RUNS] [SHAPE] [DTYPES]   (default 5, tinyllama, "bf16 int8 q4 f32")
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-5}"; shape="${2:-tinyllama}"; dtypes="${3:-bf16 int8 q4 f32}"
. bench/common.sh
model=$(bench_model "$shape")
declare -A itl
for ((r = 0; r < runs; r++)); do
  for d in $dtypes; do
    for c in 1 2 4; do
      v=$($bin bench --offline -m "$model" --dtype "$d" --kv-cache-dtype bf16 --num-prompts $c \
        --concurrency $c --input-len 16 --output-len 64 --threads 2 | field "itl ms" 4)
      itl[$d,$c]+="$v "
    done
  done
done
echo "| dtype | 1 row ITL ms | 2 rows ms | 4 rows ms | 2 / 1 | 4 / 1 |"
echo "|---|---|---|---|---|---|"
for d in $dtypes; do
  a=$(tr ' ' '\n' <<<"${itl[$d,1]}" | grep . | median)
  b=$(tr ' ' '\n' <<<"${itl[$d,2]}" | grep . | median)
  c=$(tr ' ' '\n' <<<"${itl[$d,4]}" | grep . | median)
  awk -v d="$d" -v a="$a" -v b="$b" -v c="$c" \
    'BEGIN {printf "| %s | %s | %s | %s | %.2fx | %.2fx |\n", d, a, b, c, b / a, c / a}'
done
