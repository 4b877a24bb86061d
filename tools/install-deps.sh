#!/usr/bin/env bash
# Installs the Debian 12 packages Deltafin needs, by purpose. Every dependency is a Debian package
# chosen on purpose (docs/DEPENDENCIES.md); nothing is downloaded at build time.
#
#   tools/install-deps.sh              build and run `deltafin` (what tools/demo.sh needs)
#   tools/install-deps.sh --tests      ... and everything the test tiers need (tools/test.sh, CI)
#   tools/install-deps.sh --training   ... and the training recipe's set (training/README.md)
#
# Flags combine. Packages go in with --no-install-recommends, so a runtime machine gets no browser,
# no deep-learning framework and no cross toolchain.
set -euo pipefail

want_tests=0
want_training=0
for arg in "$@"; do
  case "$arg" in
    --tests) want_tests=1 ;;
    --training) want_training=1 ;;
    -h | --help)
      sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "install-deps.sh: unknown option '$arg' (use --tests, --training)" >&2
      exit 2
      ;;
  esac
done

# Build and run: compiler, build system and the libraries `deltafin` links.
PACKAGES=(
  g++ cmake ninja-build pkg-config  # toolchain
  nlohmann-json3-dev                # config, safetensors headers, index files
  libcli11-dev                      # command line
  libhwy-dev                        # SIMD kernels (Highway 1.0.3)
  libpcre2-dev                      # tokenizer pre-tokenizer (PCRE2: UTF, UCP, JIT)
  libcpp-httplib-dev                # `deltafin serve` (HTTP server)
  libcurl4-openssl-dev libssl-dev   # setup: HTTP client (libcurl), SHA-256 (libcrypto)
)

if ((want_tests)); then
  PACKAGES+=(
    libgtest-dev libgmock-dev            # tests
    g++-aarch64-linux-gnu qemu-user      # ARM64 cross build of the kernel tests, run under qemu
    libhwy-dev:arm64 libgtest-dev:arm64  # ... its target libraries (Debian multiarch)
    clang-format                         # formatting check in the test script
    clang-tidy                           # static checks in the test script (tools/clang_tidy.sh)
    clang libclang-rt-14-dev             # libFuzzer runs of the tokenizer and request parser
    python3                              # small helpers in e2e tests
    nginx                                # setup tests: a local hub on 127.0.0.1 (Range support)
    chromium                             # server_browser: the web chat page in headless chromium
    python3-torch python3-numpy          # trained-model agreement test: PyTorch K3 reference
    libopenblas0-pthread                 # ... torch's BLAS: ~12x faster than the reference libblas3
    wamerican                            # demo test: continuation words vs /usr/share/dict/words
    curl                                 # README test: the serve block's curl request
    ccache                               # compiler cache: CI's second build tree reuses objects
  )
fi

if ((want_training)); then
  PACKAGES+=(
    python3 python3-torch python3-numpy  # training/train.py
    libopenblas0-pthread                 # ... torch's BLAS
    bible-kjv                            # the training corpus (training/bpe.py runs `bible`)
  )
fi

# The tokenizer oracle test runs OpenAI's tiktoken from npm (WASM) and the server tests run the
# official OpenAI and Anthropic Node SDKs (tested with node 20). Any node >= 18 with npm will do;
# a machine whose node comes from elsewhere (e.g. a nodejs build that bundles npm) keeps it.
if ((want_tests)) && { ! command -v node >/dev/null || ! command -v npm >/dev/null; }; then
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
  echo "run: sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
if [[ " ${missing[*]} " == *":arm64 "* ]] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
  dpkg --add-architecture arm64
fi
apt-get update
apt-get install -y --no-install-recommends "${missing[@]}"
