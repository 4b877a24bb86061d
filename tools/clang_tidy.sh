#!/usr/bin/env bash
# Runs clang-tidy (Debian 12's /usr/bin/clang-tidy, LLVM 14) with the checked-in .clang-tidy over
# every src/**/*.cc, using the release build's compile_commands.json, in parallel; any warning
# fails (docs/RELIABILITY.md "Static checks"). Usage: tools/clang_tidy.sh [BUILD_DIR] [JOBS]
# (defaults: build/release, nproc). The release preset must have been configured first.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
jobs=${2:-$(nproc)}
tidy=${CLANG_TIDY:-/usr/bin/clang-tidy}
if [[ ! -f "$build/compile_commands.json" ]]; then
  echo "clang_tidy.sh: $build/compile_commands.json is missing (cmake --preset release)" >&2
  exit 1
fi
start=$(date +%s)
# One file per clang-tidy process; xargs exits non-zero if any of them failed.
status=0
git ls-files -- 'src/*.cc' | xargs -P "$jobs" -n 1 "$tidy" -p "$build" --quiet \
  --warnings-as-errors='*' || status=$?
files=$(git ls-files -- 'src/*.cc' | wc -l)
echo "clang-tidy: $files files, $jobs jobs, $(($(date +%s) - start)) s, $([[ $status == 0 ]] && echo clean || echo FAILED)"
exit "$status"
