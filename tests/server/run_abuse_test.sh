#!/usr/bin/env bash
# ctest server_abuse (label e2e): the server-under-abuse campaign (abuse_test.py, on loopback with
# the tiny model) and the busy-port check: a second `serve` on a port in use must fail.
#   run_abuse_test.sh DELTAFIN_BINARY WORK_DIR
set -euo pipefail
bin=$1
work=$2
src=$(cd "$(dirname "$0")" && pwd)
source "$src/serve_lib.sh"
trap stop_servers EXIT
mkdir -p "$work"
make_tiny_model

# --no-prefix-cache: the disconnect-during-prefill checks need prompts that are prefilled.
start_server base "$work/serve.log" --model "$work/model" --threads 1 --max-queue 4 --no-prefix-cache \
  --header-timeout 4 --max-body-mib 1 --read-timeout 2 --retry-after 3 --ping-interval 0.2

# Busy port: a second server on the same port fails with a clear message (and never shares it).
port=${base##*:}
port=${port%%/*}
if out=$(timeout 60 "$bin" serve --model "$work/model" --port "$port" 2>&1); then
  echo "a second serve on busy port $port started: $out" >&2; exit 1
fi
grep -q "already in use" <<<"$out" || { echo "unexpected failure on a busy port: $out" >&2; exit 1; }
echo "ok - a second serve on busy port $port fails: $(grep -o 'cannot listen.*' <<<"$out")"

# A second server with a small connection cap, for the cap case.
start_server cap "$work/serve-cap.log" --model "$work/model" --threads 1 --max-connections 8

python3 "$src/abuse_test.py" "$base" "$base_pid" "$cap" ||
  { echo "--- server log"; tail -30 "$work/serve.log"; exit 1; }
kill -0 "$base_pid" || { echo "the server died" >&2; exit 1; }
kill -0 "$cap_pid" || { echo "the capped server died" >&2; exit 1; }
