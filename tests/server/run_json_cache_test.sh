#!/usr/bin/env bash
# ctest server_json_cache (label e2e): constrained JSON output (response_format) and the
# persistent prefix cache of `deltafin serve` on the tiny model (json_cache_test.py): 50 seeded
# sampled json_schema answers all parse and validate, json_object answers parse as objects, an
# unsupported schema keyword is a 400 naming it; a ~2,000-token system prompt is cached (the second
# request and the first after a restart report >= 1,900 cached tokens and a time to first token
# <= 30% (second request) and <= 50% (after a restart, which reads the cache file) of the first's),
# a corrupted cache file is detected, deleted and ignored, and a cache
# folder that cannot be written is a warning, not a failure; --cache-bytes 0 keeps the cache in RAM
# only (it serves the prefix, writes no folder, and a restart starts cold).
#   run_json_cache_test.sh DELTAFIN_BINARY WORK_DIR
set -euo pipefail
bin=$1
work=$2
src=$(cd "$(dirname "$0")" && pwd)
source "$src/serve_lib.sh"
trap stop_servers EXIT
mkdir -p "$work"
make_tiny_model
rm -rf "$work/cache"
serve_args=(--model "$work/model" --threads 2 --cache-dir "$work/cache")
start_server base "$work/serve1.log" "${serve_args[@]}"
python3 "$src/json_cache_test.py" cache-first "$base" "$work/ttft.json" || {
  tail -30 "$work/serve1.log"; exit 1; }
python3 "$src/json_cache_test.py" json "$base" || { tail -30 "$work/serve1.log"; exit 1; }
kill "$base_pid"; wait "$base_pid" 2>/dev/null || true
ls "$work/cache"/*.dfpc >/dev/null || { echo "no cache files written" >&2; exit 1; }

# A restart: the cache comes back from disk.
start_server base "$work/serve2.log" "${serve_args[@]}"
python3 "$src/json_cache_test.py" cache-restart "$base" "$work/ttft.json" || {
  tail -30 "$work/serve2.log"; exit 1; }
kill "$base_pid"; wait "$base_pid" 2>/dev/null || true

# Corrupt every cache file (one flipped byte past the header): detected, deleted, ignored.
for f in "$work/cache"/*.dfpc; do
  python3 - "$f" <<'PY'
import sys
p = sys.argv[1]
with open(p, "r+b") as f:
    f.seek(0, 2)
    n = f.tell()
    f.seek(n // 2)
    b = f.read(1)
    f.seek(n // 2)
    f.write(bytes([b[0] ^ 0x40]))
PY
done
start_server base "$work/serve3.log" "${serve_args[@]}"
python3 "$src/json_cache_test.py" cache-corrupt "$base" "$work/ttft.json" || {
  tail -30 "$work/serve3.log"; exit 1; }
grep -q "fails its checksum" "$work/serve3.log" || {
  echo "the corrupt cache file was not reported" >&2; tail -20 "$work/serve3.log"; exit 1; }
echo "ok - a corrupted cache file is detected, deleted and ignored"
kill "$base_pid"; wait "$base_pid" 2>/dev/null || true

# A cache folder that cannot be written (a file in its place): a warning, and the server runs.
touch "$work/not-a-dir"
start_server base "$work/serve4.log" --model "$work/model" --threads 2 --cache-dir "$work/not-a-dir"
grep -q "running without the disk cache" "$work/serve4.log" || {
  echo "no warning for an unwritable cache dir" >&2; cat "$work/serve4.log"; exit 1; }
python3 "$src/json_cache_test.py" smoke "$base"
echo "ok - an unwritable --cache-dir warns and the server still answers"
kill "$base_pid"; wait "$base_pid" 2>/dev/null || true

# --cache-bytes 0: RAM only, as its help says.
rm -rf "$work/ram-only"
ram_args=(--model "$work/model" --threads 2 --cache-dir "$work/ram-only" --cache-bytes 0)
start_server base "$work/serve5.log" "${ram_args[@]}"
python3 "$src/json_cache_test.py" cache-ram "$base" || { tail -30 "$work/serve5.log"; exit 1; }
kill "$base_pid"; wait "$base_pid" 2>/dev/null || true
[[ ! -e $work/ram-only ]] || { echo "--cache-bytes 0 created $work/ram-only" >&2; exit 1; }
start_server base "$work/serve6.log" "${ram_args[@]}"
python3 "$src/json_cache_test.py" cache-corrupt "$base" "$work/ttft.json" || {
  tail -30 "$work/serve6.log"; exit 1; }
echo "ok - --cache-bytes 0 keeps the prefix cache in RAM only"
