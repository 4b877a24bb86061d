#!/usr/bin/env bash
# ctest server_sdk (label e2e): `deltafin serve` on loopback with the tiny model, driven by the
# official OpenAI Node SDK (sdk_test.mjs), then by the Anthropic and OpenAI SDKs on the agent APIs
# /v1/messages and /v1/responses (agent_sdk_test.mjs).
#   run_sdk_test.sh DELTAFIN_BINARY WORK_DIR
# npm ci installs the locked `openai` and `@anthropic-ai/sdk` packages into WORK_DIR (never into the source tree).
set -euo pipefail
bin=$1
work=$2
src=$(cd "$(dirname "$0")" && pwd)
source "$src/serve_lib.sh"
trap stop_servers EXIT
mkdir -p "$work"
npm_ci "$src"
cp "$src/sdk_test.mjs" "$src/agent_sdk_test.mjs" "$src/test_runner.mjs" "$work/"
make_tiny_model
start_server base "$work/serve.log" --model "$work/model" --max-queue 1 --threads 1
start_server auth "$work/serve_auth.log" --model "$work/model" --api-key sekrit --threads 1
WORK_DIR=$work node "$work/sdk_test.mjs" "$bin" "$work/model" "$base" "$auth" sekrit || {
  echo "--- server log"; tail -30 "$work/serve.log"; exit 1; }
WORK_DIR=$work node "$work/agent_sdk_test.mjs" "$base" "$auth" sekrit || {
  echo "--- server log"; tail -30 "$work/serve.log"; exit 1; }
