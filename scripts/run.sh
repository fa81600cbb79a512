#!/usr/bin/env bash
# The main job: sets up, builds, fetches the default model (stories260K) and generates a story
# with it, streamed to stdout. Extra arguments go to `tokenflow generate`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh release >/dev/null
scripts/get-model stories260K >/dev/null
if [ $# -eq 0 ]; then
  set -- --prompt "Once upon a time" --max-tokens 200 --temperature 0.8 --top-p 0.9 --verbose
fi
exec build/release/tokenflow generate --model models/stories260K/stories260K.bin "$@"
