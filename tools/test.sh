#!/usr/bin/env bash
# The project's test command (README): installs missing Debian packages, checks formatting, builds
# the release preset and runs every test tier, then builds the ASan+UBSan preset and runs the unit
# and golden tiers under the sanitizers.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh

jobs=$(nproc)
echo "== clang-format check"
git ls-files -- '*.h' '*.cc' | xargs clang-format --dry-run -Werror

echo "== release build + all tests"
cmake --preset release >/dev/null
cmake --build --preset release -j "$jobs"
ctest --preset release -j "$jobs"

if [[ "${DF_SKIP_ASAN:-0}" != 1 ]]; then
  echo "== ASan+UBSan build + unit and golden tests"
  cmake --preset asan >/dev/null
  cmake --build --preset asan -j "$jobs"
  ctest --preset asan -j "$jobs"
fi
