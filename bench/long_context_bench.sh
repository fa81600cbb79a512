#!/usr/bin/env bash
# Long contexts (issue 56, item 3): prefill tok/s of long prompts and decode tok/s at a depth of
# 0 / 1k / 4k / 16k tokens already in the cache, on the 1.1B TinyLlama shape with a 32k context
# (random weights, one GGUF file per type from bench/make_bench_gguf.py), medians of RUNS runs.
# Decode at depth D: one sequence with a D-token prompt, then 32 new tokens; its tok/s is 1000 /
# the median inter-token latency (the prompt's prefill excluded). Prefill tok/s: D / time to
# first token. Each depth is also given as a ratio to depth 0 of the same engine.
#
# With LLAMA_BENCH=path/to/llama-bench, llama.cpp runs the same file in the same run, interleaved
# (flash attention on: `-fa 1`, its CPU path for long contexts; `-d D -p 0 -n 32` for decode at
# depth, `-p D -n 0` for prefill).
#
# Usage: bench/long_context_bench.sh [RUNS] [TYPES...]     (TYPES: GGUF types; default q8_0)
#   DEPTHS="0 1024 4096 16384"  decode depths;  PREFILL="4096 16384"  prompt lengths timed
#   KV=bf16  our --kv-cache-dtype;  LLAMA_BENCH=path  llama.cpp's llama-bench
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"; shift $(($# < 1 ? $# : 1))
types=("$@"); [ ${#types[@]} -gt 0 ] || types=(q8_0)
depths=(${DEPTHS:-0 1024 4096 16384})
prefill=(${PREFILL:-4096 16384})
kv="${KV:-bf16}"
threads="${THREADS:-$(nproc)}"
llama="${LLAMA_BENCH:-}"
. bench/common.sh
[ -x "$bin" ] || { echo "build first: scripts/build.sh release" >&2; exit 1; }
[ -z "$llama" ] || [ -x "$llama" ] || { echo "LLAMA_BENCH=$llama is not executable" >&2; exit 1; }
shape=tinyllama-32k

# ours DEPTH FILE -> "decode_tok_s prefill_tok_s" (a 16-token prompt stands for depth 0)
ours() {
  local len=$(($1 > 16 ? $1 : 16)) out
  out=$("$bin" bench --offline -m "$2" --num-prompts 1 --concurrency 1 --input-len "$len" \
    --output-len 33 --threads "$threads" --kv-cache-dtype "$kv" --kv-cache-memory 1GiB)
  awk -v n="$len" '/^itl ms/ {d = 1000 / $4} /^ttft ms/ {p = n * 1000 / $4}
    END {printf "%.2f %.1f\n", d, p}' <<<"$out"
}
# llama_tg DEPTH FILE / llama_pp LEN FILE -> llama.cpp's tok/s (bench/common.sh: llama_ts)
llama_tg() { llama_ts "$2" -fa 1 -p 0 -n 32 -d "$1"; }
llama_pp() { llama_ts "$2" -fa 1 -p "$1" -n 0; }

declare -A dec pre ldec lpre
for t in "${types[@]}"; do bench_gguf "$shape" "$t" > /dev/null; done
for ((i = 0; i < runs; i++)); do
  for t in "${types[@]}"; do
    f=$(bench_gguf "$shape" "$t")
    for d in "${depths[@]}"; do
      read -r dd pp < <(ours "$d" "$f")
      dec[$t,$d]+="$dd "
      pre[$t,$d]+="$pp "
      [ -z "$llama" ] || ldec[$t,$d]+="$(llama_tg "$d" "$f") "
    done
    for p in "${prefill[@]}"; do
      # a depth run timed this prompt's prefill already
      [[ " ${depths[*]} " == *" $p "* ]] || { read -r _ pp < <(ours "$p" "$f"); pre[$t,$p]+="$pp "; }
      [ -z "$llama" ] || lpre[$t,$p]+="$(llama_pp "$p" "$f") "
    done
  done
done

med() { tr ' ' '\n' <<<"$1" | grep . | median; }
flags=$(grep -m1 '^flags' /proc/cpuinfo)
if [[ $flags == *amx_tile* ]]; then class=A; elif [[ $flags == *avx512f* ]]; then class=B; else class=C; fi
echo "class $class ($(lscpu | sed -n 's/^Model name: *//p')); $runs runs; $threads threads; KV $kv; ${bin}${llama:+; llama.cpp $llama}"
echo
echo "| type | depth | decode tok/s | / depth 0 | llama.cpp decode tok/s | / depth 0 | ours / llama.cpp |"
echo "|---|---|---|---|---|---|---|"
for t in "${types[@]}"; do
  d0=$(med "${dec[$t,${depths[0]}]}"); l0=$([ -z "$llama" ] || med "${ldec[$t,${depths[0]}]}")
  for d in "${depths[@]}"; do
    x=$(med "${dec[$t,$d]}"); y=$([ -z "$llama" ] || med "${ldec[$t,$d]}")
    awk -v t="$t" -v d="$d" -v x="$x" -v x0="$d0" -v y="${y:-0}" -v y0="${l0:-0}" 'BEGIN {
      if (y > 0) printf "| %s | %d | %.2f | %.2f | %.2f | %.2f | %.2f |\n", t, d, x, x / x0, y, y / y0, x / y
      else printf "| %s | %d | %.2f | %.2f | - | - | - |\n", t, d, x, x / x0 }'
  done
done
echo
echo "| type | prompt tokens | prefill tok/s | llama.cpp prefill tok/s | ours / llama.cpp |"
echo "|---|---|---|---|---|"
for t in "${types[@]}"; do
  for p in "${prefill[@]}"; do
    x=$(med "${pre[$t,$p]}"); y=$([ -z "$llama" ] || med "${lpre[$t,$p]}")
    awk -v t="$t" -v p="$p" -v x="$x" -v y="${y:-0}" 'BEGIN {
      if (y > 0) printf "| %s | %d | %.1f | %.1f | %.2f |\n", t, p, x, y, x / y
      else printf "| %s | %d | %.1f | - | - |\n", t, p, x }'
  done
done
