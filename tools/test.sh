#!/usr/bin/env bash
# The project's test command (README): installs missing Debian packages, checks formatting, builds
# the release preset and runs every test tier, runs clang-tidy over src/, runs the bounded fuzzers
# (tokenizer libFuzzer, the tokenizer's differential fuzzer against npm tiktoken, the server's
# request parser), cross-builds the kernel tests for ARM64 and runs them under qemu-aarch64, then
# builds the ASan+UBSan preset and runs the unit, golden and kernel tiers under the sanitizers.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh --tests

jobs=$(nproc)
echo "== clang-format check"
git ls-files -- '*.h' '*.cc' | xargs clang-format --dry-run -Werror

echo "== release build + all tests"
cmake --preset release >/dev/null
cmake --build --preset release -j "$jobs"
ctest --preset release -j "$jobs"

# DF_SKIP_TIDY=1 skips it for a quick local run; CI never sets it.
if [[ "${DF_SKIP_TIDY:-0}" != 1 ]]; then
  echo "== clang-tidy over src/ (.clang-tidy, release compile_commands.json; docs/RELIABILITY.md)"
  tools/clang_tidy.sh build/release "$jobs"
fi

echo "== tokenizer fuzzing (libFuzzer + ASan/UBSan, bounded)"
tests/tokenizer/fuzz.sh build/fuzz-tokenizer 45

echo "== tokenizer differential fuzzing against npm tiktoken (60 s, docs/RELIABILITY.md)"
# Reuses the oracle test's work folder (its npm ci of the pinned tiktoken).
tests/tokenizer/difffuzz.sh build/release build/release/tests/tokenizer-oracle 60

echo "== server request-parser fuzzing (libFuzzer + ASan/UBSan, bounded)"
tests/server/fuzz.sh build/fuzz-server 30

echo "== ARM64 cross build of the kernel tests, run under qemu-aarch64 (NEON)"
cmake -S tests/kernels -B build/aarch64 -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DDF_WERROR=ON --toolchain "$PWD/cmake/aarch64-linux-gnu.cmake" >/dev/null
cmake --build build/aarch64 -j "$jobs"
ctest --test-dir build/aarch64 --output-on-failure

if [[ "${DF_SKIP_ASAN:-0}" != 1 ]]; then
  echo "== ASan+UBSan build + unit, golden and kernel tests"
  cmake --preset asan >/dev/null
  cmake --build --preset asan -j "$jobs"
  ctest --preset asan -j "$jobs"
fi
