#!/usr/bin/env bash
# A mixture of experts against the dense model of the same active size (issue 21): OLMoE-1B-7B's
# form at half width (bench/make_bench_gguf.py olmoe-mini: 64 experts, 8 per token, 1.7B
# parameters, 0.37B active) and a Llama whose MLP is as wide as the 8 chosen experts together
# (olmoe-mini-dense), both Q4_K, random weights. Each figure the median of RUNS interleaved runs:
# decode tok/s of one sequence (input 16, output 128), decode of 8 at once (output tok/s of all),
# prefill of a 512-token prompt (tok/s from its time to first token), resident set after load.
# Usage: bench/moe_bench.sh [RUNS] [TYPE]
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"; type="${2:-q4_k}"
. bench/common.sh
shapes=(olmoe-mini-dense olmoe-mini)
declare -A dec dec8 pre rss
for s in "${shapes[@]}"; do bench_gguf "$s" "$type" > /dev/null; done
for ((r = 0; r < runs; r++)); do
  for s in "${shapes[@]}"; do
    f=$(bench_gguf "$s" "$type")
    out=$($bin bench --offline -m "$f" --num-prompts 2 --concurrency 1 --input-len 16 --output-len 128)
    dec[$s]+="$(awk '/^output tok\/s/ {print $3}' <<<"$out") "
    rss[$s]=$(awk '/^peak rss/ {print $7}' <<<"$out" | tr -d '(;')
    out=$($bin bench --offline -m "$f" --num-prompts 8 --concurrency 8 --input-len 16 --output-len 128)
    dec8[$s]+="$(awk '/^output tok\/s/ {print $3}' <<<"$out") "
    out=$($bin bench --offline -m "$f" --num-prompts 2 --concurrency 1 --input-len 512 --output-len 1)
    pre[$s]+="$(awk '/^ttft ms/ {print 512000 / $4}' <<<"$out") "
  done
done
med() { tr ' ' '\n' <<<"$1" | grep . | median; }
d0=$(med "${dec[${shapes[0]}]}"); e0=$(med "${dec8[${shapes[0]}]}"); p0=$(med "${pre[${shapes[0]}]}")
echo "| model ($type) | file MiB | decode tok/s | vs dense | 8 at once tok/s | vs dense | prefill 512 tok/s | vs dense | RSS after load MiB |"
echo "|---|---|---|---|---|---|---|---|---|"
for s in "${shapes[@]}"; do
  d=$(med "${dec[$s]}"); e=$(med "${dec8[$s]}"); p=$(med "${pre[$s]}")
  printf "| %s | %d | %s | %.2f | %s | %.2f | %.0f | %.2f | %s |\n" "$s" \
    $(( $(stat -c %s build/bench-models/$s-$type.gguf) / 1048576 )) "$d" "$(echo "$d / $d0" | bc -l)" \
    "$e" "$(echo "$e / $e0" | bc -l)" "$p" "$(echo "$p / $p0" | bc -l)" "${rss[$s]}"
done
