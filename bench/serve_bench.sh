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

# A chat service's load (issue 56 item 6): ShareGPT-like lengths (log-normal around 128 in / 128
# out), half the requests behind one 256-token system prompt, Poisson arrivals at rising rates
# until the objective breaks (TTFT p99 2 s, ITL p99 200 ms), against the 110M shape as a Q8_0
# GGUF (`tokenflow convert`, Llama 2's vocabulary). With LLAMA_SERVER=path/to/llama-server the
# same client then runs against llama.cpp's server on the same file, and both go on one chart.
gguf=build/bench-models/llama110m-q8_0.gguf
[ -f "$gguf" ] || $bin convert "$(bench_model llama110m)" "$gguf" --dtype q8_0 \
  --tokenizer ../shared/tokenizers/llama2/tokenizer.bin > /dev/null
rate_sweep() {  # rate_sweep NAME -- server command...
  local name=$1
  shift 2
  "$@" > "/tmp/serve-$name.log" 2>&1 &
  local pid=$!
  for _ in $(seq 300); do  # tokenflow's /readyz, llama-server's /health
    curl -sf "http://127.0.0.1:$port/readyz" > /dev/null && break
    curl -sf "http://127.0.0.1:$port/health" > /dev/null && break
    sleep 0.2
  done
  $bin bench --url "http://127.0.0.1:$port" --workload sharegpt --request-rate 1,2,4,8,16,32 \
    --num-prompts 64 --input-len 128 --output-len 128 --system-prompt-len 256 --system-share 0.5 \
    --max-model-len 1024 --slo-ttft-ms 2000 --slo-itl-ms 200 \
    --json-out "bench/serve-sharegpt-$name.json" || true
  kill -TERM $pid; wait $pid || true
}
echo "== ShareGPT-like rate sweep, llama110m Q8_0 GGUF: tokenflow"
rate_sweep tokenflow -- $bin serve --port $port --access-log off -m "$gguf" --threads 2 \
  --kv-cache-memory 1GiB
charts=(bench/serve-sharegpt-tokenflow.json)
if [ -n "${LLAMA_SERVER:-}" ]; then
  echo "== the same against llama-server ($LLAMA_SERVER)"
  rate_sweep llama-server -- "$LLAMA_SERVER" -m "$gguf" --port $port -t 2 -np 16 -c 16384 \
    --cont-batching
  charts+=(bench/serve-sharegpt-llama-server.json)
fi
/usr/bin/python3 scripts/plot-bench "${charts[@]}" -o bench/serve-sharegpt.png \
  --title "ShareGPT-like load, Poisson arrivals (llama110m Q8_0)"
