#!/usr/bin/env bash
# Differential tokenizer fuzzing against npm tiktoken (tools/test.sh runs it for 60 s): generated
# adversarial inputs (long whitespace, digit and letter runs, mixed Unicode whitespace, invalid
# UTF-8, special spellings, up to 1 MB) through deltafin and tiktoken for cl100k_base, o200k_base
# and K3; any id difference is shrunk, printed and fails the run. See docs/RELIABILITY.md.
#   tests/tokenizer/difffuzz.sh BUILD_DIR WORK_DIR [SECONDS (default 60)] [FIRST_SEED (default 1)]
# npm ci installs the locked tiktoken into WORK_DIR (as run_oracle.sh does; the npm registry or
# cache is needed once). BUILD_DIR must hold tests/tokenizer_difffuzz_peer.
set -euo pipefail
build=$1
work=$2
secs=${3:-60}
seed=${4:-1}
src=$(cd "$(dirname "$0")" && pwd)
model=$src/../data/golden/tiny-k3
peer=$build/tests/tokenizer_difffuzz_peer
[[ -x $peer ]] || { echo "difffuzz.sh: $peer not built (cmake --build ... --target tokenizer_difffuzz_peer)" >&2; exit 2; }
mkdir -p "$work"
cp "$src/oracle/package.json" "$src/oracle/package-lock.json" "$src/oracle/oracle.cjs" \
  "$src/oracle/difffuzz.cjs" "$work/"
if ! cmp -s "$src/oracle/package-lock.json" "$work/node_modules/.deltafin-lock" 2>/dev/null; then
  (cd "$work" && npm ci --no-audit --no-fund --loglevel=error)
  cp "$src/oracle/package-lock.json" "$work/node_modules/.deltafin-lock"
fi
node "$work/oracle.cjs" extract "$work"
node "$work/difffuzz.cjs" "$peer" "$work" "$model" --seconds "$secs" --first-seed "$seed" --out "$work"
