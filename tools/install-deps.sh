#!/usr/bin/env bash
# Installs the Debian 12 packages Deltafin builds and tests with. Every dependency is a Debian
# package chosen on purpose (DESIGN.md); nothing is downloaded at build time.
set -euo pipefail

PACKAGES=(
  g++ cmake ninja-build pkg-config       # toolchain
  nlohmann-json3-dev                     # config, safetensors headers, index files
  libcli11-dev                           # command line
  libgtest-dev libgmock-dev              # tests
  libhwy-dev                             # SIMD kernels (Highway 1.0.3)
  g++-aarch64-linux-gnu qemu-user        # ARM64 cross build of the kernel tests, run under qemu
  libhwy-dev:arm64 libgtest-dev:arm64    # ... its target libraries (Debian multiarch)
  clang-format                           # formatting check in the test script
  clang-tidy                             # static checks in the test script (tools/clang_tidy.sh)
  libpcre2-dev                           # tokenizer pre-tokenizer (PCRE2: UTF, UCP, JIT)
  clang libclang-rt-14-dev               # libFuzzer run of the tokenizer in the test script
  python3                                # small helpers in e2e tests
  libcpp-httplib-dev                     # `deltafin serve` (HTTP server)
  libcurl4-openssl-dev libssl-dev        # setup: HTTP client (libcurl), SHA-256 (libcrypto)
  nginx                                  # setup tests: a local hub on 127.0.0.1 (Range support)
  chromium                               # server_browser: the web chat page in headless chromium
  python3-torch python3-numpy            # trained demo model: PyTorch K3 reference (training/)
  libopenblas0-pthread                   # ... torch's BLAS: ~12x faster than the reference libblas3
  bible-kjv                              # ... its training corpus (training/bpe.py runs `bible`)
  wamerican                              # demo test: continuation words vs /usr/share/dict/words
)

# The tokenizer oracle test runs OpenAI's tiktoken from npm (WASM). Any node >= 18 with npm will
# do; a machine whose node comes from elsewhere (e.g. a nodejs build that bundles npm) keeps it.
# The server test runs the OpenAI Node SDK (openai 6.9.0, native fetch; tested with node 20).
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  PACKAGES+=(nodejs npm)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "missing packages: ${missing[*]}" >&2
  echo "run: sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
if [[ " ${missing[*]} " == *":arm64 "* ]] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
  dpkg --add-architecture arm64
fi
apt-get update
apt-get install -y --no-install-recommends "${missing[@]}"
