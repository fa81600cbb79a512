#!/usr/bin/env bash
# The engine's targets, measured side by side in one run (issue 5), each a median of RUNS:
#  1. continuous vs static batching (padded, as TF Serving, and ragged), 32 concurrent requests,
#     output lengths mixed 16..256;
#  2. total decode tok/s at 32 concurrent sequences vs one sequence alone;
#  3. time to first token with a 512-token shared prefix, prefix caching on vs off;
# plus peak RSS. Usage: bench/engine_bench.sh [RUNS] [SHAPE]   (SHAPE: llama110m, gpt2-124m)
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"; shape="${2:-llama110m}"
. bench/common.sh
model=$(bench_model "$shape")
run() { $bin bench --offline -m "$model" "$@"; }

for mode in continuous static static-ragged; do
  v=$(for ((r = 0; r < runs; r++)); do run --num-prompts 64 --concurrency 32 --input-len 64 --output-range 16:256 --batching $mode | field "output tok/s" 3; done | median)
  echo "mixed 16..256, concurrency 32, $mode: output tok/s $v"
done
for c in 1 32; do
  n=$(( c == 1 ? 4 : 64 ))
  v=$(for ((r = 0; r < runs; r++)); do run --num-prompts $n --concurrency $c --input-len 16 --output-len 128 | field "output tok/s" 3; done | median)
  echo "decode, concurrency $c: output tok/s $v"
done
for pc in "" "--no-prefix-caching"; do
  v=$(for ((r = 0; r < runs; r++)); do run --num-prompts 16 --concurrency 1 --prefix-len 512 --input-len 16 --output-len 8 $pc | field "ttft ms" 4; done | median)
  echo "ttft p50 ms, 512-token shared prefix, ${pc:-prefix caching on}: $v"
done
run --num-prompts 128 --concurrency 64 --input-len 128 --output-len 128 | grep -E "peak rss|kv cache|output tok/s"
