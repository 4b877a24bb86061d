#!/usr/bin/env bash
# ctest server_http (label e2e): raw HTTP, load, CORS, logging and security checks of
# `deltafin serve` with the tiny model (http_test.py), plus the refusal to bind a non-loopback
# address without a key and bad --log-level / --cors-origin values.
#   run_http_test.sh DELTAFIN_BINARY WORK_DIR
set -euo pipefail
bin=$1
work=$2
src=$(cd "$(dirname "$0")" && pwd)
source "$src/serve_lib.sh"
trap stop_servers EXIT
mkdir -p "$work"
make_tiny_model

# Security: a non-loopback bind without --api-key is refused before anything is loaded.
if out=$("$bin" serve --model "$work/model" --host 0.0.0.0 --port 0 2>&1); then
  echo "serve --host 0.0.0.0 without a key started: $out" >&2; exit 1
fi
grep -q "insecure-no-auth" <<<"$out" || { echo "unexpected refusal: $out" >&2; exit 1; }
echo "ok - non-loopback bind without --api-key refused"

# Bad logging and CORS options are refused with a message, before anything is loaded.
for bad in "--log-level verbose" "--cors-origin localhost:3000" "--cors-origin http://x/path"; do
  # shellcheck disable=SC2086
  if out=$("$bin" serve --model "$work/model" --port 0 $bad 2>&1); then
    echo "serve $bad started: $out" >&2; exit 1
  fi
  grep -qi "log-level\|cors-origin" <<<"$out" || { echo "serve $bad: unclear error: $out" >&2; exit 1; }
done
echo "ok - bad --log-level and --cors-origin values refused"

# --no-prefix-cache: these checks expect every new prompt to be prefilled (timings of the prefill
# step, conversation reuse counts); the prefix cache has its own test (run_json_cache_test.sh).
start_server base "$work/serve.log" --model "$work/model" --threads 1 --max-queue 2 --no-prefix-cache \
  --ping-interval 0.1 --max-body-mib 1 --read-timeout 1 --header-timeout 2
start_server cors "$work/serve_cors.log" --model "$work/model" --threads 1 \
  --cors-origin http://allowed.example --api-key sekrit
python3 "$src/http_test.py" "$base" "$base_pid" "$work/serve.log" "$cors" || {
  echo "--- server log"; tail -30 "$work/serve.log"; exit 1; }
# --no-webui: GET / is a 404 like any unknown route.
start_server noweb "$work/serve_noweb.log" --model "$work/model" --threads 1 --no-webui
python3 - "${noweb%/v1}/" <<'PY'
import sys, urllib.error, urllib.request
try:
    urllib.request.urlopen(sys.argv[1], timeout=30)
    sys.exit("GET / answered with --no-webui")
except urllib.error.HTTPError as e:
    assert e.code == 404, e.code
PY
echo "ok - --no-webui: GET / is a 404"
# No prompt or output text in the log without --log-prompts.
if grep -q "capital of France" "$work/serve.log"; then echo "prompt text was logged" >&2; exit 1; fi
echo "ok - prompts not logged"
