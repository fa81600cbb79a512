#!/usr/bin/env bash
# Batched decode per weight dtype (issue 7's "32 sequences vs one"): total output tok/s at
# concurrency 1 and 32 (input 16, output 128, KV cache in bf16), medians of RUNS interleaved runs,
# and their ratio. Usage: bench/batch_bench.sh [RUNS] [SHAPE]   (SHAPE: llama110m, gpt2-124m)
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"; shape="${2:-llama110m}"
. bench/common.sh
model=$(bench_model "$shape")
dtypes="f32 bf16 int8 q4"
declare -A one many
for ((r = 0; r < runs; r++)); do
  for d in $dtypes; do
    for c in 1 32; do
      v=$($bin bench --offline -m "$model" --dtype "$d" --kv-cache-dtype bf16 --num-prompts $((c * 2)) \
        --concurrency $c --input-len 16 --output-len 128 | field "output tok/s" 3)
      if ((c == 1)); then one[$d]+="$v "; else many[$d]+="$v "; fi
    done
  done
done
echo "| dtype | 1 sequence tok/s | 32 sequences tok/s | ratio |"
echo "|---|---|---|---|"
for d in $dtypes; do
  a=$(tr ' ' '\n' <<<"${one[$d]}" | grep . | median)
  b=$(tr ' ' '\n' <<<"${many[$d]}" | grep . | median)
  awk -v d="$d" -v a="$a" -v b="$b" 'BEGIN {printf "| %s | %s | %s | %.1fx |\n", d, a, b, b / a}'
done
