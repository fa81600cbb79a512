# Shared by the benchmark scripts (sourced): the binary, the random-weight bench model of a
# shape (written on first use), and median / field helpers over `tokenflow bench` output.
bin=${BIN:-build/release/tokenflow}
bench_model() {  # bench_model SHAPE -> prints the model directory, writing it if missing
  local model=build/bench-models/$1
  [ -f "$model/model.safetensors" ] || /usr/bin/python3 bench/make_bench_model.py "$model" "$1" >&2
  echo "$model"
}
bench_gguf() {  # bench_gguf SHAPE TYPE -> prints the random-weight GGUF's path, writing it if missing
  local f=build/bench-models/$1-$2.gguf
  [ -f "$f" ] || /usr/bin/python3 bench/make_bench_gguf.py "$f" "$1" "$2" >&2
  echo "$f"
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
field() { awk -v k="$1" -v n="$2" 'index($0, k) == 1 {print $n}'; }
# llama_ts FILE ARGS... -> avg_ts (tok/s) of each test llama-bench ($LLAMA_BENCH, 1 repetition,
# $threads or all cores) ran on FILE with ARGS, one per line, in its order.
llama_ts() {
  "$LLAMA_BENCH" -m "$1" -t "${threads:-$(nproc)}" -r 1 -o jsonl "${@:2}" 2>/dev/null |
    /usr/bin/python3 -c 'import json, sys; [print(json.loads(l)["avg_ts"]) for l in sys.stdin if l.strip()]'
}
