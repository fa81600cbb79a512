#!/usr/bin/env bash
# The gRPC front door against the HTTP one (issue 11): one `tokenflow serve` with both, then the
# same `tokenflow bench --url` load (128-token prompts, 128 new tokens, streaming, concurrency 1
# and 16) through SSE (http://) and through GenerationService/GenerateStream (grpc://), in turn,
# REPS times, on stories260K (where the front door's own cost shows: thousands of tokens/s) and
# on the 110M Llama shape (int8). Prints the medians and the gRPC / HTTP ratios, and the server's
# own CPU time per 1,000 output tokens (from /proc: the client shares the machine and its own
# cost differs between the two protocols, so throughput alone mixes both); JSON per run in
# build/grpc-bench/<shape>-<api>-<rep>.json. Usage: bench/grpc_bench.sh [REPS]   (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
reps="${1:-3}"
. bench/common.sh
port=18766
gport=18767
mkdir -p build/grpc-bench
run_shape() {  # run_shape NAME PROMPTS -- serve args...
  local name=$1 prompts=$2
  shift 3
  $bin serve --port $port --grpc-port $gport --access-log off "$@" > "/tmp/tokenflow-grpc-$name.log" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/readyz" > /dev/null && break; sleep 0.2; done
  local ticks
  ticks=$(getconf CLK_TCK)
  for rep in $(seq "$reps"); do
    for api in http grpc; do
      local t0
      t0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
      $bin bench --url "$api://127.0.0.1:$([ $api = http ] && echo $port || echo $gport)" \
        --sweep 1,16 --num-prompts "$prompts" --input-len 128 --output-len 128 \
        --json-out "build/grpc-bench/$name-$api-$rep.json" > /dev/null
      echo $(( $(awk '{print $14 + $15}' "/proc/$pid/stat") - t0 )) $ticks \
        > "build/grpc-bench/$name-$api-$rep.cpu"
    done
  done
  kill -TERM $pid; wait $pid || true
  /usr/bin/python3 - "$name" "$reps" <<'PY'
import json, statistics, sys
name, reps = sys.argv[1], int(sys.argv[2])
runs = {api: [json.load(open("build/grpc-bench/%s-%s-%d.json" % (name, api, r + 1)))
              for r in range(reps)] for api in ("http", "grpc")}
print("| %s: concurrency | API | output tok/s | TTFT p50 ms | ITL p50 ms | e2e p50 ms |" % name)
print("|---|---|---|---|---|---|")
ratios = []
for i, level in enumerate(runs["http"][0]["levels"]):
    med = {}
    for api in ("http", "grpc"):
        lv = [run["levels"][i] for run in runs[api]]
        med[api] = {k: statistics.median(x[k] if k == "output_throughput" else x[k]["p50"]
                                         for x in lv)
                    for k in ("output_throughput", "ttft_ms", "itl_ms", "e2e_ms")}
        m = med[api]
        print("| %d | %s | %.1f | %.2f | %.2f | %.1f |" % (level["concurrency"], api,
              m["output_throughput"], m["ttft_ms"], m["itl_ms"], m["e2e_ms"]))
    ratios.append((level["concurrency"], med["grpc"]["output_throughput"] /
                   med["http"]["output_throughput"]))
print()
for c, r in ratios:
    print("%s, concurrency %d: gRPC / HTTP output tok/s = %.2f" % (name, c, r))
cpu = {}
for api in ("http", "grpc"):
    per = []
    for r in range(reps):
        used, hz = map(int, open("build/grpc-bench/%s-%s-%d.cpu" % (name, api, r + 1)).read().split())
        tokens = sum(lv["output_tokens"] for lv in runs[api][r]["levels"])
        per.append(used / hz * 1000 / tokens * 1000)
    cpu[api] = statistics.median(per)
    print("%s, %s: server CPU %.1f ms per 1,000 output tokens (median of %d)" % (name, api,
          cpu[api], reps))
print("%s: server CPU gRPC / HTTP = %.2f" % (name, cpu["grpc"] / cpu["http"]))
PY
}
run_shape stories260k 128 -- -m ../shared/models/stories260K/stories260K.bin --kv-cache-memory 256MiB
run_shape llama110m 32 -- -m "$(bench_model llama110m)" --tokenizer ../shared/tokenizers/llama2 \
  --dtype int8 --kv-cache-dtype bf16 --kv-cache-memory 1GiB
