#!/usr/bin/env bash
# The 8-bit KV cache (issue 55) on TinyLlama-1.1B's shape (random weights, 22 layers, 4 KV heads
# of 64), q8_0 against bf16, each figure the median of RUNS interleaved runs:
# - capacity: the blocks a 2 GiB --kv-cache-memory holds (the engine's own count), as concurrent
#   4,096-token sequences;
# - decode: int8 weights, 32 sequences at once (random 512-token prompts, 64 output tokens
#   each, prefix cache off): decode tok/s = 32 / ITL p50, where a step reads ~1.1 GB of weights
#   and 32 x ~540 positions of K/V.
# Usage: bench/kv_bench.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"
. bench/common.sh
model=$(bench_model tinyllama)
kvs="bf16 q8_0"
declare -A dec blocks
for ((r = 0; r < runs; r++)); do
  for kv in $kvs; do
    out=$($bin bench --offline -m "$model" --dtype int8 --kv-cache-dtype "$kv" \
      --kv-cache-memory 2GiB --num-prompts 32 --concurrency 32 --input-len 512 --output-len 64 \
      --no-prefix-caching --threads 2)
    dec[$kv]+="$(awk '/^itl ms/ {print 32000 / $4}' <<<"$out") "
    blocks[$kv]=$(awk '/^kv cache/ {print $3}' <<<"$out")
  done
done
bf16_dec=$(tr ' ' '\n' <<<"${dec[bf16]}" | grep . | median)
echo "| KV cache | blocks in 2 GiB | 4,096-token sequences | decode tok/s (32 seqs, int8 weights) | runs | ratio |"
echo "|---|---|---|---|---|---|"
for kv in $kvs; do
  d=$(tr ' ' '\n' <<<"${dec[$kv]}" | grep . | median)
  printf "| %s | %s | %s | %.1f | %s | %.3f |\n" "$kv" "${blocks[$kv]}" \
    "$((blocks[$kv] * 16 / 4096))" "$d" "${dec[$kv]}" "$(echo "$d / $bf16_dec" | bc -l)"
done
