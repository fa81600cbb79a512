#!/usr/bin/env bash
# Speculative decoding (docs/speculative.md) on stories260K inside TinyLlama-1.1B's body
# (bench/make_padded_stories.py: a real model's outputs at a 1.1B-shaped step's cost), bf16
# weights, 2 threads. Batch-1 greedy decode tok/s (`tokenflow generate -v`) without speculation,
# with prompt lookup and with a q4 self-draft, on an input-grounded prompt (a story the model
# wrote, twice, then its opening again: the prompt-lookup case) and on a free one; a sampled one
# (temperature 0.8) with the self-draft; then output tok/s at 16 and 32 concurrent sequences
# (`tokenflow bench --offline`, random prompts) with each. Runs interleaved, medians of RUNS, ratios
# against "off" of the same run.
# Usage: bench/spec_bench.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/common.sh
runs="${1:-3}"
model=build/bench-models/stories-1b
[ -f "$model/model.safetensors" ] || /usr/bin/python3 bench/make_padded_stories.py "$model" >&2
tok=../shared/models/stories260K/tok512.bin
story=$("$bin" generate -m ../shared/models/stories260K/stories260K.bin -p "Once upon a time" \
  -n 100 -t 0 2>/dev/null | tr '\n' ' ')
grounded="$story $story Once upon a time"
declare -A mode=([off]="--speculative off" [ngram]="--speculative ngram"
                 [q4-draft]="--speculative draft:$model --draft-dtype q4 --num-speculative-tokens 3")
one() {  # one PROMPT TEMPERATURE MODE -> "tok/s acceptance%/tokens-per-verification-step"
  "$bin" generate -m "$model" --tokenizer "$tok" --dtype bf16 --threads 2 -p "$1" -n 150 -t "$2" \
    --seed 1 --ignore-eos --no-echo -v ${mode[$3]} 2>&1 >/dev/null |
    awk '/^decode:/ {t = $2} /^speculation:/ {a = $10 "%/" $12} END {gsub(/[(]/, "", a); print t, (a == "" ? "-" : a)}'
}
report() {  # report LABEL MODES...: interleaved runs, medians, ratios against the first
  local label="$1"; shift
  declare -A tps acc
  for ((r = 0; r < runs; r++)); do
    for m in "$@"; do
      read -r t a <<<"$(eval "$run_one")"
      tps[$m]+="$t "; acc[$m]="$a"
    done
  done
  local base
  base=$(printf '%s\n' ${tps[$1]} | median)
  for m in "$@"; do
    local med
    med=$(printf '%s\n' ${tps[$m]} | median)
    printf '%-28s %-9s %8.1f tok/s  x%.2f  acceptance/tokens per step %s\n' "$label" "$m" "$med" \
      "$(awk -v a="$base" -v b="$med" 'BEGIN {print b / a}')" "${acc[$m]}"
  done
}
run_one='one "$grounded" 0 "$m"'; report "batch 1, grounded, greedy" off ngram q4-draft
run_one='one "Once upon a time" 0 "$m"'; report "batch 1, free, greedy" off ngram q4-draft
run_one='one "Once upon a time" 0.8 "$m"'; report "batch 1, free, T=0.8" off q4-draft
for c in 16 32; do
  run_one='"$bin" bench --offline -m "$model" --dtype bf16 --threads 2 --num-prompts $((2 * c)) \
    --concurrency $c --input-len 64 --output-len 64 ${mode[$m]} | field "output tok/s" 3 | sed "s/$/ -/"'
  report "concurrency $c" off ngram q4-draft
done
