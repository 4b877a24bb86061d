#!/usr/bin/env bash
# ctest server_speculate (label e2e): `deltafin serve --speculate ngram` and `--speculate off` on
# the bundled demo model give identical greedy answers (speculate_test.py).
#   run_speculate_test.sh DELTAFIN_BINARY MODEL_DIR WORK_DIR
set -euo pipefail
bin=$1
model=$2
work=$3
src=$(cd "$(dirname "$0")" && pwd)
source "$src/serve_lib.sh"
trap stop_servers EXIT
mkdir -p "$work"
common=(--model "$model" --threads 1 --no-prefix-cache --no-webui)
start_server spec "$work/spec.log" "${common[@]}" --speculate ngram --draft-max 8
start_server off "$work/off.log" "${common[@]}" --speculate off
python3 "$src/speculate_test.py" "$spec" "$off" || {
  echo "--- spec server log"; tail -20 "$work/spec.log"; exit 1; }
