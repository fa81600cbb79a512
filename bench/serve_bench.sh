#!/usr/bin/env bash
# The server under load (issue 9): `tokenflow bench --url` sweeps concurrency 1, 4, 16, 64 with
# 128-token prompts and 128 new tokens against `tokenflow serve` on stories260K and on the 110M
# Llama shape (random weights, Llama 2's tokenizer), writes bench/serve-<shape>.json and draws
# bench/serve-sweep.png. Usage: bench/serve_bench.sh [DTYPE]   (DTYPE of the 110M shape: int8)
set -euo pipefail
cd "$(dirname "$0")/.."
dtype="${1:-int8}"
. bench/common.sh
port=18765
serve_sweep() {  # serve_sweep NAME PROMPTS -- serve args...
  local name=$1 prompts=$2
  shift 3
  $bin serve --port $port --access-log off "$@" > "/tmp/tokenflow-serve-$name.log" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/readyz" > /dev/null && break; sleep 0.2; done
  $bin bench --url "http://127.0.0.1:$port" --sweep 1,4,16,64 --num-prompts "$prompts" \
    --input-len 128 --output-len 128 --json-out "bench/serve-$name.json" || true
  kill -TERM $pid; wait $pid || true
}
echo "== stories260K (f32)"
serve_sweep stories260k 256 -- -m ../shared/models/stories260K/stories260K.bin --kv-cache-memory 256MiB
echo "== llama110m ($dtype weights, bf16 KV cache)"
serve_sweep llama110m 64 -- -m "$(bench_model llama110m)" --tokenizer ../shared/tokenizers/llama2 \
  --dtype "$dtype" --kv-cache-dtype bf16 --kv-cache-memory 1GiB
/usr/bin/python3 scripts/plot-bench bench/serve-stories260k.json bench/serve-llama110m.json \
  -o bench/serve-sweep.png --title "tokenflow serve, bench --url (128 in / 128 out)"
