# Shared by the server test scripts (sourced): start a `deltafin serve` on a free port and stop it.
#   start_server VAR LOG deltafin-serve-args...   sets VAR to the base URL, VAR_pid to the PID
#   stop_servers                                  kills every server started here (trap EXIT)
#   make_tiny_model                               writes a fresh tiny make-model model to $work/model
#   npm_ci PKG_DIR                                installs PKG_DIR's locked npm packages into $work
#                                                 (npm ci, skipped when that lock is installed already)
server_pids=()
start_server() {
  local var=$1 log=$2
  shift 2
  "$bin" serve --port 0 "$@" >"$log" 2>&1 &
  local pid=$!
  server_pids+=("$pid")
  local url=""
  for _ in $(seq 1 300); do
    url=$(grep -o 'http://[0-9.]*:[0-9]*/v1' "$log" | head -1 || true)
    [[ -n $url ]] && break
    kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; echo "server exited" >&2; return 1; }
    sleep 0.1
  done
  [[ -n $url ]] || { cat "$log" >&2; echo "server did not start" >&2; return 1; }
  printf -v "$var" '%s' "$url"
  printf -v "${var}_pid" '%s' "$pid"
}
stop_servers() {
  for pid in "${server_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${server_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
npm_ci() {
  local pkg=$1
  mkdir -p "$work"
  cp "$pkg/package.json" "$pkg/package-lock.json" "$work/"
  if ! cmp -s "$pkg/package-lock.json" "$work/node_modules/.deltafin-lock" 2>/dev/null; then
    (cd "$work" && npm ci --no-audit --no-fund --loglevel=error)
    cp "$pkg/package-lock.json" "$work/node_modules/.deltafin-lock"
  fi
}
make_tiny_model() {
  rm -rf "$work/model"
  "$bin" make-model --preset tiny --out "$work/model" >/dev/null
}
