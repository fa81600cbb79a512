#!/usr/bin/env bash
# Weight dtypes side by side (issue 7), each figure the median of RUNS interleaved runs:
# decode tok/s of one sequence (input 16, output 128) with the weight bandwidth it reaches,
# prefill of a 512-token prompt (tok/s from its time to first token), and peak RSS.
# Usage: bench/dtype_bench.sh [RUNS] [SHAPE]   (SHAPE: llama110m, gpt2-124m)
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"; shape="${2:-llama110m}"
. bench/common.sh
model=$(bench_model "$shape")
dtypes="f32 bf16 f16 int8 q4"
declare -A dec gbs pre rss
for ((r = 0; r < runs; r++)); do
  for d in $dtypes; do
    out=$($bin bench --offline -m "$model" --dtype "$d" --num-prompts 2 --concurrency 1 --input-len 16 --output-len 128)
    dec[$d]+="$(awk '/^output tok\/s/ {print $3}' <<<"$out") "
    gbs[$d]+="$(awk '/^weights/ {print $6}' <<<"$out") "
    rss[$d]=$(awk '/^peak rss/ {print $4}' <<<"$out")
    out=$($bin bench --offline -m "$model" --dtype "$d" --num-prompts 2 --concurrency 1 --input-len 512 --output-len 1)
    pre[$d]+="$(awk '/^ttft ms/ {print 512000 / $4}' <<<"$out") "
  done
done
echo "| dtype | decode tok/s | weight GB/s | prefill 512 tok/s | peak RSS MiB |"
echo "|---|---|---|---|---|"
for d in $dtypes; do
  printf "| %s | %s | %s | %s | %s |\n" "$d" \
    "$(tr ' ' '\n' <<<"${dec[$d]}" | grep . | median)" "$(tr ' ' '\n' <<<"${gbs[$d]}" | grep . | median)" \
    "$(tr ' ' '\n' <<<"${pre[$d]}" | grep . | median | xargs printf '%.0f')" "${rss[$d]}"
done
