#!/usr/bin/env bash
# GGUF tensor types side by side (issue 20): random-weight Llama GGUFs of one shape, one file per
# type (bench/make_bench_gguf.py, written once under build/bench-models/), each figure the median
# of RUNS interleaved runs: decode tok/s of one sequence (input 16, output 128),
# prefill of a 512-token prompt (tok/s from its time to first token), resident set after load.
# Ratios against f32 in the same run. Usage: bench/gguf_bench.sh [RUNS] [SHAPE] [TYPES...]
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"; shape="${2:-llama110m}"; shift 2 || true
types=("$@"); [ ${#types[@]} -gt 0 ] || types=(f32 f16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k iq4_nl iq4_xs q4_k_m)
. bench/common.sh
declare -A dec pre rss
for t in "${types[@]}"; do bench_gguf "$shape" "$t" > /dev/null; done
for ((r = 0; r < runs; r++)); do
  for t in "${types[@]}"; do
    f=$(bench_gguf "$shape" "$t")
    out=$($bin bench --offline -m "$f" --num-prompts 2 --concurrency 1 --input-len 16 --output-len 128)
    dec[$t]+="$(awk '/^output tok\/s/ {print $3}' <<<"$out") "
    rss[$t]=$(awk '/^peak rss/ {print $7}' <<<"$out" | tr -d '(;')
    out=$($bin bench --offline -m "$f" --num-prompts 2 --concurrency 1 --input-len 512 --output-len 1)
    pre[$t]+="$(awk '/^ttft ms/ {print 512000 / $4}' <<<"$out") "
  done
done
med() { tr ' ' '\n' <<<"$1" | grep . | median; }
f32d=$(med "${dec[${types[0]}]}"); f32p=$(med "${pre[${types[0]}]}")
echo "| type | file MiB | decode tok/s | vs ${types[0]} | prefill 512 tok/s | vs ${types[0]} | RSS after load MiB |"
echo "|---|---|---|---|---|---|---|"
for t in "${types[@]}"; do
  d=$(med "${dec[$t]}"); p=$(med "${pre[$t]}")
  printf "| %s | %d | %s | %.2f | %.0f | %.2f | %s |\n" "$t" \
    $(( $(stat -c %s build/bench-models/$shape-$t.gguf) / 1048576 )) "$d" \
    "$(echo "$d / $f32d" | bc -l)" "$p" "$(echo "$p / $f32p" | bc -l)" "${rss[$t]}"
done
