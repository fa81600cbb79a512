#!/usr/bin/env bash
# Load time and resident set of GGUF files (issue 20): `tokenflow generate` of one token from a
# one-token prompt (load, tokenizer, one step; KV cache 64 MiB), its wall time and peak RSS from
# /usr/bin/time, the median of RUNS interleaved runs per type, beside the file's size.
# Usage: bench/gguf_load_bench.sh [RUNS] [SHAPE] [TYPES...]   (files from make_bench_gguf.py)
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-3}"; shape="${2:-tinyllama}"; shift 2 || true
types=("$@"); [ ${#types[@]} -gt 0 ] || types=(f16 q8_0 q4_k_m)
. bench/common.sh
declare -A secs rss
for t in "${types[@]}"; do bench_gguf "$shape" "$t" > /dev/null; done
for ((r = 0; r < runs; r++)); do
  for t in "${types[@]}"; do
    out=$( { /usr/bin/time -f "%e %M" $bin generate -m "$(bench_gguf "$shape" "$t")" \
             --prompt-ids 1 -n 1 --kv-cache-memory 64MiB > /dev/null; } 2>&1 | tail -1)
    secs[$t]+="$(awk '{print $1}' <<<"$out") "
    rss[$t]+="$(awk '{print $2 / 1024}' <<<"$out") "
  done
done
med() { tr ' ' '\n' <<<"$1" | grep . | median; }
echo "| type | file MiB | load + 1 token s | peak RSS MiB | RSS / file |"
echo "|---|---|---|---|---|"
for t in "${types[@]}"; do
  mib=$(( $(stat -c %s build/bench-models/$shape-$t.gguf) / 1048576 ))
  r=$(med "${rss[$t]}")
  printf "| %s | %d | %s | %.0f | %.2f |\n" "$t" "$mib" "$(med "${secs[$t]}")" "$r" "$(echo "$r / $mib" | bc -l)"
done
