#!/usr/bin/env bash
# ctest server_browser (label e2e): the web chat page (GET /) in Debian's chromium, headless,
# driven over the DevTools protocol by browser/chat_page_test.mjs, against `deltafin serve` with
# the tiny model on 127.0.0.1. No browser is downloaded: chromium comes from apt
# (tools/install-deps.sh), the DevTools client (chrome-remote-interface) from the locked
# browser/package-lock.json, installed by npm ci into WORK_DIR (never into the source tree).
#   run_browser_test.sh DELTAFIN_BINARY WORK_DIR
# Leaves WORK_DIR/chat_page.png (a screenshot of the page after one answer).
set -euo pipefail
bin=$1
work=$2
src=$(cd "$(dirname "$0")" && pwd)
chromium=${DF_CHROMIUM:-$(command -v chromium || true)}
if [[ -z $chromium || ! -x $chromium ]]; then
  echo "FAIL: chromium not found: the browser test needs Debian's 'chromium' package" \
       "(apt-get install chromium, as tools/install-deps.sh does), or DF_CHROMIUM=/path" >&2
  exit 1
fi
source "$src/serve_lib.sh"
browser_pid=""
cleanup() {
  [[ -n $browser_pid ]] && kill "$browser_pid" 2>/dev/null && wait "$browser_pid" 2>/dev/null
  stop_servers
  [[ -n ${profile:-} ]] && rm -rf "$profile"
  return 0
}
trap cleanup EXIT
mkdir -p "$work"
npm_ci "$src/browser"
cp "$src/browser/chat_page_test.mjs" "$work/"
make_tiny_model
# Streamed experts through a cache far smaller than the tiny model's 9.6 MiB of experts, so that
# tokens wait for reads and the panel has I/O wait to show.
# --no-prefix-cache: the page shows the prefill of each answer.
start_server base "$work/serve.log" --model "$work/model" --threads 1 --no-prefix-cache --experts streamed \
  --expert-cache 2M
start_server auth "$work/serve_auth.log" --model "$work/model" --threads 1 --api-key sekrit
root=${base%/v1}

# A fresh profile each run; everything that would phone home is off.
profile=$(mktemp -d "$work/chromium-profile.XXXXXX")
"$chromium" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --user-data-dir="$profile" --remote-debugging-address=127.0.0.1 --remote-debugging-port=0 \
  about:blank >"$work/chromium.log" 2>&1 &
browser_pid=$!
for _ in $(seq 1 200); do
  [[ -s $profile/DevToolsActivePort ]] && break
  kill -0 "$browser_pid" 2>/dev/null || { cat "$work/chromium.log" >&2; echo "FAIL: chromium exited" >&2; exit 1; }
  sleep 0.1
done
[[ -s $profile/DevToolsActivePort ]] || { cat "$work/chromium.log" >&2; echo "FAIL: no DevTools port" >&2; exit 1; }
devtools_port=$(head -1 "$profile/DevToolsActivePort")

timeout 60 node "$work/chat_page_test.mjs" "$root" "$devtools_port" "$work" "$work/serve.log" \
  "${auth%/v1}" sekrit || {
  echo "--- server log"; tail -30 "$work/serve.log"; echo "--- chromium log"; tail -20 "$work/chromium.log"
  exit 1; }
