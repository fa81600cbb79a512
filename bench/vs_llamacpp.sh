#!/usr/bin/env bash
# Issue 22's item 6 in one run: decode tok/s of one sequence (16 prompt tokens, 128 generated) and
# prefill tok/s of a 512-token prompt (from its time to first token) for each row of the issue's
# table, medians of RUNS interleaved runs, against llama.cpp's figures for this class of machine
# (../shared/reference/cpu-limits.md, copied below: class A, Intel Xeon with AMX, and class C,
# AMD Zen 3 with AVX2 only; there are none for class B). Random-weight models of the same shapes
# (bench/make_bench_gguf.py); bf16 / int8 / q4 are tokenflow's own types, packed at load from the
# f32 file, compared with llama.cpp's BF16 / Q8_0 / Q4_0 as the issue's table does.
# With LLAMA_BENCH=path/to/llama-bench, llama.cpp is measured in the same run instead (`-p 512
# -n 128`, 1 repetition per run, interleaved with ours; the medians of the runs), on the same
# GGUF files.
# Usage: bench/vs_llamacpp.sh [RUNS] [SHAPES...]   (SHAPES: llama110m tinyllama)
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"; shift $(($# < 1 ? $# : 1))
shapes=("$@"); [ ${#shapes[@]} -gt 0 ] || shapes=(llama110m tinyllama)
. bench/common.sh
flags=$(grep -m1 '^flags' /proc/cpuinfo)
if [[ $flags == *amx_tile* ]]; then class=A
elif [[ $flags == *avx512f* ]]; then class=B
else class=C; fi
# llama.cpp (cpu-limits.md), "decode/prefill" per class, shape and llama.cpp type.
declare -A ref=(
  [A,llama110m,F32]=54/812 [A,llama110m,BF16]=85/711 [A,llama110m,Q8_0]=256/1405
  [A,llama110m,Q4_0]=405/1336
  [A,tinyllama,F32]=5.5/91 [A,tinyllama,BF16]=8.1/83 [A,tinyllama,Q8_0]=23.5/202
  [A,tinyllama,Q4_0]=38.6/179
  [C,llama110m,F32]=63/476 [C,llama110m,BF16]=86/448 [C,llama110m,Q8_0]=157/468
  [C,llama110m,Q4_0]=216/613
  [C,tinyllama,F32]=7.7/48 [C,tinyllama,BF16]=11.3/48 [C,tinyllama,Q8_0]=17.1/50
  [C,tinyllama,Q4_0]=30/52
)
rows=(f32:F32 bf16:BF16 q8_0:Q8_0 int8:Q8_0 q4_0:Q4_0 q4:Q4_0)
model_args() {  # SHAPE TYPE -> bench flags for the model
  case "$2" in
    int8|q4|bf16) echo "-m $(bench_gguf "$1" f32) --dtype $2" ;;
    *) echo "-m $(bench_gguf "$1" "$2")" ;;
  esac
}
declare -A dec pre ldec lpre
for s in "${shapes[@]}"; do for r in "${rows[@]}"; do model_args "$s" "${r%%:*}" > /dev/null; done; done
llama_types=(F32 BF16 Q8_0 Q4_0)
if [ -n "${LLAMA_BENCH:-}" ]; then
  [ -x "$LLAMA_BENCH" ] || { echo "LLAMA_BENCH=$LLAMA_BENCH is not executable" >&2; exit 1; }
  for s in "${shapes[@]}"; do for l in "${llama_types[@]}"; do bench_gguf "$s" "${l,,}" > /dev/null; done; done
fi
for ((i = 0; i < runs; i++)); do
  for s in "${shapes[@]}"; do
    for r in "${rows[@]}"; do
      t=${r%%:*}
      # shellcheck disable=SC2046
      out=$($bin bench --offline $(model_args "$s" "$t") --num-prompts 2 --concurrency 1 \
        --input-len 16 --output-len 128)
      dec[$s,$t]+="$(field "output tok/s" 3 <<<"$out") "
      # shellcheck disable=SC2046
      out=$($bin bench --offline $(model_args "$s" "$t") --num-prompts 2 --concurrency 1 \
        --input-len 512 --output-len 1)
      pre[$s,$t]+="$(awk '/^ttft ms/ {print 512000 / $4}' <<<"$out") "
    done
    if [ -n "${LLAMA_BENCH:-}" ]; then
      for l in "${llama_types[@]}"; do
        { read -r pp; read -r tg; } < <(llama_ts "$(bench_gguf "$s" "${l,,}")" -p 512 -n 128)
        lpre[$s,$l]+="$pp "; ldec[$s,$l]+="$tg "
      done
    fi
  done
done
med() { tr ' ' '\n' <<<"$1" | grep . | median; }
echo "class $class ($(lscpu | sed -n 's/^Model name: *//p')); $runs runs; ${bin}; llama.cpp: ${LLAMA_BENCH:-the figures of cpu-limits.md}"
echo "| shape | ours (llama.cpp's) | decode tok/s ours / llama.cpp | ratio | prefill 512 tok/s ours / llama.cpp | ratio |"
echo "|---|---|---|---|---|---|"
for s in "${shapes[@]}"; do
  for r in "${rows[@]}"; do
    t=${r%%:*}; l=${r##*:}
    d=$(med "${dec[$s,$t]}"); p=$(med "${pre[$s,$t]}")
    ref_v=${ref[$class,$s,$l]:-}
    [ -z "${LLAMA_BENCH:-}" ] || ref_v="$(med "${ldec[$s,$l]}")/$(med "${lpre[$s,$l]}")"
    if [ -n "$ref_v" ]; then
      awk -v s="$s" -v t="$t" -v l="$l" -v d="$d" -v p="$p" -v rd="${ref_v%/*}" -v rp="${ref_v#*/}" \
        'BEGIN {printf "| %s | %s (%s) | %.1f / %s | %.2f | %.0f / %s | %.2f |\n", s, t, l, d, rd, d / rd, p, rp, p / rp}'
    else
      printf "| %s | %s (%s) | %.1f / - | - | %.0f / - | - |\n" "$s" "$t" "$l" "$d" "$p"
    fi
  done
done
