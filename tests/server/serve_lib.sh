# Shared by the server test scripts (sourced): start a `deltafin serve` on a free port and stop it.
#   start_server VAR LOG deltafin-serve-args...   sets VAR to the base URL, VAR_pid to the PID
#   stop_servers                                  kills every server started here (trap EXIT)
#   make_tiny_model                               writes a fresh tiny make-model model to $work/model
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
make_tiny_model() {
  rm -rf "$work/model"
  "$bin" make-model --preset tiny --out "$work/model" >/dev/null
}
