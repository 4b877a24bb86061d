#!/usr/bin/env bash
# ctest server_trained_sdk (label e2e): `deltafin serve` on the bundled trained demo model, driven
# by the official OpenAI Node SDK (trained_sdk_test.mjs): the answers are readable English.
#   run_trained_sdk_test.sh DELTAFIN_BINARY MODEL_DIR WORK_DIR
# npm ci installs the locked packages into WORK_DIR (never into the source tree).
set -euo pipefail
bin=$1
model=$2
work=$3
src=$(cd "$(dirname "$0")" && pwd)
source "$src/serve_lib.sh"
trap stop_servers EXIT
[[ -r /usr/share/dict/words ]] || { echo "no /usr/share/dict/words (apt-get install wamerican)"; exit 1; }
mkdir -p "$work"
npm_ci "$src"
cp "$src/trained_sdk_test.mjs" "$work/"
start_server base "$work/serve.log" --model "$model" --threads 1
node "$work/trained_sdk_test.mjs" "$base" || { echo "--- server log"; tail -30 "$work/serve.log"; exit 1; }
