#!/usr/bin/env bash
# The main job: sets up, builds, fetches the default model (stories260K) and serves it over HTTP
# (OpenAI and TF Serving APIs) on 127.0.0.1:8080 and gRPC on 127.0.0.1:8500 (TF Serving's gRPC
# port), printing a curl line to try. Ctrl-C (or SIGTERM) shuts it down gracefully. Extra
# arguments go to `tokenflow serve` (e.g. --port 9000 --grpc-port 9001).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh release >/dev/null
scripts/get-model stories260K >/dev/null
exec build/release/tokenflow --log-level info serve --model models/stories260K/stories260K.bin \
  --grpc-port 8500 "$@"
