#!/usr/bin/env bash
# Tokenizer encode throughput, single thread, MB/s (median of RUNS): ours on GPT-2 (encoder.json
# and tokenizer.json) and Llama 2 (tokenizer.model), beside the npm package gpt-tokenizer
# (r50k_base) on the same text in the same run; plus a 1 MB word of one repeated letter.
# Usage: bench/tokenizer_bench.sh [RUNS] [MEGABYTES]
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-5}"; mb="${2:-4}"
bench=build/release/bench/bench_tokenizer
[ -x "$bench" ] || { echo "build first: scripts/build.sh release" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
/usr/bin/python3 bench/make_text.py "$tmp/mixed.txt" "$mb"
head -c 1048576 /dev/zero | tr '\0' 'a' > "$tmp/aaaa.txt"
g=../shared/tokenizers/gpt2
echo "text: $(wc -c < "$tmp/mixed.txt") bytes of mixed text"
echo "tokenflow gpt2 (encoder.json):   $($bench $g/encoder.json "$tmp/mixed.txt" "$runs")"
echo "tokenflow gpt2 (tokenizer.json): $($bench $g/tokenizer.json "$tmp/mixed.txt" "$runs")"
echo "tokenflow llama2 (sentencepiece): $($bench ../shared/tokenizers/llama2/tokenizer.model "$tmp/mixed.txt" "$runs")"
echo "tokenflow gpt2, 1 MB of 'a':      $($bench $g/tokenizer.json "$tmp/aaaa.txt" 3)"
node -e '
const enc = require(process.argv[1] + "/gpt-tokenizer/cjs/encoding/r50k_base");
const text = require("fs").readFileSync(process.argv[2], "utf8");
const runs = +process.argv[3]; const t = [];
let n = 0;
for (let r = 0; r < runs; r++) { const t0 = process.hrtime.bigint(); n = enc.encode(text).length; t.push(Number(process.hrtime.bigint() - t0) / 1e9); }
t.sort((a, b) => a - b); const med = t[Math.floor(t.length / 2)];
console.log(`npm gpt-tokenizer r50k_base:     ${(Buffer.byteLength(text) / 1e6 / med).toFixed(2)} MB/s  (${n} tokens, median ${med.toFixed(3)} s of ${runs} runs)`);
' "$(pwd)/tests/js/node_modules" "$tmp/mixed.txt" "$runs"
