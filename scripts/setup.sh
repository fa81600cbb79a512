#!/usr/bin/env bash
# Installs every Debian package that building, running and testing tokenflow needs.
# Idempotent and quiet: prints nothing unless something fails (then the apt log).
set -euo pipefail

packages=(
  build-essential g++ cmake ninja-build pkg-config git
  libfmt-dev libspdlog-dev nlohmann-json3-dev libcli11-dev
  libpcre2-dev libsentencepiece-dev libicu-dev libboost-dev curl
  libprotobuf-dev protobuf-compiler libgrpc++-dev protobuf-compiler-grpc libssl-dev openssl
  libhdf5-dev libleveldb-dev
  prometheus systemd haproxy
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-numpy python3-jinja2 python3-sentencepiece python3-matplotlib
  python3-grpcio python3-grpc-tools python3-yaml python3-h5py python3-jsonschema
  clang-format
  # The playground's browser test (tests/serving/test_playground.py) drives it headless.
  chromium
)

# node + npm run the independent JavaScript implementations the tests compare against.
command -v node >/dev/null 2>&1 || packages+=(nodejs)
command -v npm >/dev/null 2>&1 || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if [ ${#missing[@]} -gt 0 ] && ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
  cat "$log" >&2
  echo "setup.sh: installing ${missing[*]} failed" >&2
  exit 1
fi

# Test clients from the npm registry, pinned by tests/js/package-lock.json.
js="$(cd "$(dirname "$0")/.." && pwd)/tests/js"
if [ ! -d "$js/node_modules" ] || [ "$js/package-lock.json" -nt "$js/node_modules" ]; then
  if ! (cd "$js" && npm ci --no-audit --no-fund --loglevel=error) >"$log" 2>&1; then
    cat "$log" >&2
    echo "setup.sh: npm ci in tests/js failed" >&2
    exit 1
  fi
  touch "$js/node_modules"
fi
