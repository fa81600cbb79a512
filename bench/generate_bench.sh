#!/usr/bin/env bash
# End-to-end generation benchmark: decode tok/s (batch 1, 128 new tokens) and prefill tok/s
# (a 512-token prompt; 128 for tinyllama) of `tokenflow generate`, median of RUNS runs, for
# stories260K and random-weight models of real shapes (written once under build/bench-models/).
# Usage: bench/generate_bench.sh [RUNS] [SHAPES...]   (default: 5 stories260K llama110m gpt2-124m)
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-5}"; shift || true
shapes=("$@"); [ ${#shapes[@]} -gt 0 ] || shapes=(stories260K llama110m gpt2-124m)
. bench/common.sh
[ -x "$bin" ] || { echo "build first: scripts/build.sh release" >&2; exit 1; }
threads="${THREADS:-$(nproc)}"

ids() { local n=$1; seq -s, 10 $((n + 9)); }

printf "%-12s %8s %12s %12s\n" model threads "decode tok/s" "prefill tok/s"
for shape in "${shapes[@]}"; do
  if [ "$shape" = stories260K ]; then
    model=../shared/models/stories260K/stories260K.bin; plen=256
  else
    model=$(bench_model "$shape")
    plen=512; [ "$shape" = tinyllama ] && plen=128
  fi
  dec=(); pre=()
  for ((r = 0; r < runs; r++)); do
    out=$("$bin" generate -m "$model" --prompt-ids 1 -t 0 -n 128 --ignore-eos --no-echo -v --threads "$threads" 2>&1 >/dev/null)
    dec+=("$(echo "$out" | awk '/^decode:/ {print $2}')")
    out=$("$bin" generate -m "$model" --prompt-ids "$(ids $plen)" -t 0 -n 1 --ignore-eos --no-echo -v --threads "$threads" 2>&1 >/dev/null)
    pre+=("$(echo "$out" | awk '/^prefill:/ {print $2}')")
  done
  printf "%-12s %8s %12s %12s\n" "$shape" "$threads" "$(printf '%s\n' "${dec[@]}" | median)" "$(printf '%s\n' "${pre[@]}" | median)"
done
