#!/usr/bin/env bash
# ctest server_json_cache_sdk (label e2e): JSON output and the persistent prefix cache of
# `deltafin serve` on the tiny model, driven by the pinned official OpenAI and Anthropic Node SDKs
# (json_cache_sdk_test.mjs): response_format / text.format / output_config.format answers parse
# and validate, streamed equals whole, an unsupported keyword is a 400 through each SDK; then a
# server with --cache-dir is stopped and started again, and both SDKs' usage reports the cached
# system preamble while the greedy answers stay the same.
#   run_json_cache_sdk_test.sh DELTAFIN_BINARY WORK_DIR
set -euo pipefail
bin=$1
work=$2
src=$(cd "$(dirname "$0")" && pwd)
source "$src/serve_lib.sh"
trap stop_servers EXIT
mkdir -p "$work"
npm_ci "$src"
cp "$src/json_cache_sdk_test.mjs" "$src/test_runner.mjs" "$src/schema_check.mjs" "$work/"
make_tiny_model
rm -rf "$work/cache" "$work/state.json"
serve_args=(--model "$work/model" --threads 2 --cache-dir "$work/cache")
run() {  # run MODE LOG: the SDK test in MODE against $base, the server log on failure
  node "$work/json_cache_sdk_test.mjs" "$1" "$base" "$work/state.json" || {
    echo "--- server log"; tail -30 "$2"; exit 1; }
}
start_server base "$work/serve1.log" "${serve_args[@]}"
run json "$work/serve1.log"
run before "$work/serve1.log"
kill "$base_pid"; wait "$base_pid" 2>/dev/null || true
ls "$work/cache"/*.dfpc >/dev/null || { echo "no cache files written" >&2; exit 1; }
start_server base "$work/serve2.log" "${serve_args[@]}"
run after "$work/serve2.log"
