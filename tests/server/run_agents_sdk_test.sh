#!/usr/bin/env bash
# ctest server_agents_sdk (label e2e): what agents rely on, through the pinned official OpenAI and
# Anthropic Node SDKs against `deltafin serve` on the tiny random-weight model
# (agents_sdk_test.mjs): forced tool calls bound to their schemas on all three APIs, json_schema
# answers that always close within max_completion_tokens, logprobs checked against
# `deltafin logits`, and penalties.
#   run_agents_sdk_test.sh DELTAFIN_BINARY WORK_DIR
set -euo pipefail
bin=$1
work=$2
src=$(cd "$(dirname "$0")" && pwd)
source "$src/serve_lib.sh"
trap stop_servers EXIT
mkdir -p "$work"
npm_ci "$src"
cp "$src/agents_sdk_test.mjs" "$src/test_runner.mjs" "$src/schema_check.mjs" "$work/"
make_tiny_model
start_server base "$work/serve.log" --model "$work/model" --threads 2
node "$work/agents_sdk_test.mjs" "$base" "$bin" "$work/model" "$work" || {
  echo "--- server log"; tail -30 "$work/serve.log"; exit 1; }
