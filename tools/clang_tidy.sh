#!/usr/bin/env bash
# Runs clang-tidy (Debian 12's /usr/bin/clang-tidy, LLVM 14) with the checked-in .clang-tidy over
# every src/**/*.cc, using the release build's compile_commands.json, in parallel; any warning
# fails (docs/RELIABILITY.md "Static checks"). Files whose preprocessed text, compile command,
# .clang-tidy and clang-tidy version are unchanged since a clean check are not checked again
# (tools/clang_tidy.py explains the cache; DF_TIDY_CACHE= disables it).
# Usage: tools/clang_tidy.sh [BUILD_DIR] [JOBS] (defaults: build/release, nproc). The release
# preset must have been configured first.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
jobs=${2:-$(nproc)}
if [[ ! -f "$build/compile_commands.json" ]]; then
  echo "clang_tidy.sh: $build/compile_commands.json is missing (cmake --preset release)" >&2
  exit 1
fi
exec python3 tools/clang_tidy.py "$build" "$jobs"
