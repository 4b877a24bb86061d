#!/usr/bin/env bash
# Issue 12 and 32 acceptance check: the full-size K3 layout computes logits for two positions inside
# an 8 GiB memory cgroup with the spine streamed, the memory plan it prints says so, and a
# 64-token prompt prefills in one wave (each expert and the spine read once).
#
#   DF_K3_SPARSE=1 tools/k3_sparse_logits.sh [path/to/deltafin]
#
# 1. `deltafin make-model --preset k3 --sparse` writes K3's real 96-shard layout (1.56 TB, every
#    tensor a hole, vision shard included) into a temporary directory: metadata only, seconds.
# 2. `deltafin logits --tokens 1,2` runs in a fresh child memory cgroup of this shell's own
#    (cgroup v1 memory.limit_in_bytes or v2 memory.max = 8 GiB, no swap). The engine takes its
#    budget from that cgroup unless DF_K3_MEM_LIMIT (e.g. 7G) is set. Zero MXFP4 scale bytes are
#    outside the engine's exact range, so it runs with --audit-scales off --no-verify-reads.
# 3. Checks: exit status 0, a logits file of 2 x 163840 fp32, a memory plan that streams the
#    spine ("spine streamed:") and the experts, and the cgroup's peak usage within the limit.
#    Prints the times, the peak and the plan. The generated model is always removed.
# 4. `deltafin run --max-new 1 --stats-json` with a 1-token and a 64-token prompt in the same
#    cgroup: the 64-token prefill is one planned wave whose engine-counted expert bytes equal its
#    distinct experts' bytes and whose spine bytes equal the 1-token prompt's (one pass).
#
# It reads ~114 GB of spine holes and ~26 GB of expert holes (minutes), so it only runs when
# DF_K3_SPARSE=1; otherwise it exits 77 (ctest's skip code). Needs root (cgroup, and the model
# directory's file system must support sparse files; DF_K3_DIR picks its parent, default /var/tmp).
# check() evals its condition, so the single-quoted conditions below are intended:
# shellcheck disable=SC2016
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
deltafin=${1:-$here/build/release/src/cli/deltafin}
limit_bytes=$((8 << 30))
vocab=163840
tokens=1,2

if [[ "${DF_K3_SPARSE:-}" != 1 ]]; then
  echo "SKIP: set DF_K3_SPARSE=1 to run the full-size sparse K3 check (minutes, needs root)"
  exit 77
fi
[[ -x "$deltafin" ]] || { echo "FAIL: no deltafin binary at $deltafin" >&2; exit 1; }
if [[ $(id -u) != 0 ]]; then
  echo "SKIP: creating a memory cgroup needs root"
  exit 77
fi

# A child of this process's own memory cgroup, as src/cli/memory_cgroup.cc makes one.
own_v1=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' /proc/self/cgroup)
own_v2=$(awk -F: '$1 == "0" {print $3}' /proc/self/cgroup)
if [[ -n "$own_v1" && -d /sys/fs/cgroup/memory ]]; then
  cg=/sys/fs/cgroup/memory${own_v1%/}/deltafin-k3sparse-$$
  mkdir "$cg"
  echo "$limit_bytes" >"$cg/memory.limit_in_bytes"
  [[ -e "$cg/memory.memsw.limit_in_bytes" ]] &&
    { echo "$limit_bytes" >"$cg/memory.memsw.limit_in_bytes" || true; }
  peak_file=$cg/memory.max_usage_in_bytes
  cg_version=1
elif [[ -f /sys/fs/cgroup/cgroup.controllers ]]; then
  cg=/sys/fs/cgroup${own_v2%/}/deltafin-k3sparse-$$
  mkdir "$cg"
  echo "$limit_bytes" >"$cg/memory.max"
  echo 0 >"$cg/memory.swap.max" 2>/dev/null || true
  peak_file=$cg/memory.peak
  cg_version=2
else
  echo "SKIP: no memory cgroup controller found"
  exit 77
fi

work=$(mktemp -d "${DF_K3_DIR:-/var/tmp}/deltafin-k3sparse-XXXXXX")
cleanup() {
  rm -rf "$work"
  if [[ -d "$cg" ]]; then rmdir "$cg" 2>/dev/null || true; fi
}
trap cleanup EXIT

now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", b - a}'; }

echo "== make-model --preset k3 --sparse -> $work/k3"
t0=$(now)
nice -n 10 "$deltafin" make-model --preset k3 --sparse --no-sync --out "$work/k3"
t1=$(now)
gen_s=$(secs "$t0" "$t1")
shards=$(compgen -G "$work/k3/model-[0-9][0-9][0-9][0-9][0-9]-of-000096.safetensors" | wc -l)
apparent=$(du -sb --apparent-size "$work/k3" | cut -f1)
allocated=$(($(du -sk "$work/k3" | cut -f1) * 1024))
echo "generation: ${gen_s} s, $shards shards, apparent $apparent bytes, allocated $allocated bytes"
[[ "$shards" == 96 ]] || { echo "FAIL: expected 96 shards, found $shards" >&2; exit 1; }

mem_flag=()
[[ -n "${DF_K3_MEM_LIMIT:-}" ]] && mem_flag=(--mem-limit "$DF_K3_MEM_LIMIT")
logits=$work/logits.f32
echo "== logits --tokens $tokens in cgroup v$cg_version $cg (limit $limit_bytes bytes)"
t0=$(now)
set +e
# The shell joins the cgroup first, so everything the engine allocates or caches is charged there.
bash -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' _ "$cg" \
  nice -n 10 "$deltafin" logits --model "$work/k3" --tokens "$tokens" --out "$logits" \
  --experts streamed --audit-scales off --no-verify-reads "${mem_flag[@]}" 2>"$work/stderr.txt"
rc=$?
set -e
t1=$(now)
run_s=$(secs "$t0" "$t1")
peak=$(cat "$peak_file" 2>/dev/null || echo 0)
oom_file=$cg/memory.events  # v2; v1 reports oom_kill in memory.oom_control
[[ $cg_version == 1 ]] && oom_file=$cg/memory.oom_control
oom=$(awk '$1 == "oom_kill" {print $2}' "$oom_file" 2>/dev/null || true)

echo "---- deltafin stderr ----"
cat "$work/stderr.txt"
echo "-------------------------"
echo "logits run: ${run_s} s, exit status $rc"
echo "peak memory: $peak bytes ($(awk -v p="$peak" 'BEGIN {printf "%.2f", p / 2^30}') GiB)" \
  "of a $limit_bytes-byte limit (8 GiB); oom kills: ${oom:-unknown}"

fail=0
check() { if ! eval "$1"; then echo "FAIL: $2" >&2; fail=1; fi; }
check '[[ $rc == 0 ]]' "deltafin logits exited with $rc"
want=$((2 * vocab * 4))
got=$(stat -c %s "$logits" 2>/dev/null || echo 0)
check '[[ $got == "$want" ]]' "logits file has $got bytes, expected $want"
check 'grep -q "^  spine streamed: " "$work/stderr.txt"' "the memory plan does not stream the spine"
check '! grep -q "spine: .*resident (mapped)" "$work/stderr.txt"' "the memory plan maps the spine"
check 'grep -q "^  routed experts: .*streamed" "$work/stderr.txt"' \
  "the memory plan does not stream the experts"
check '[[ $peak -gt 0 && $peak -le $limit_bytes ]]' "peak memory $peak outside (0, $limit_bytes]"
check '[[ "${oom:-0}" == 0 ]]' "the cgroup OOM-killed a process"

# Issue 32: a 64-token prompt prefills in one wave: the engine reads each selected expert once and
# the spine once (the same spine bytes as a 1-token prompt), not once per 32 positions.
run_stats() {  # $1: prompt ids, $2: stats file; the same cgroup, so the peak covers it
  bash -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' _ "$cg" \
    nice -n 10 "$deltafin" run --model "$work/k3" --prompt-ids "$1" --max-new 1 \
    --experts streamed --audit-scales off --no-verify-reads "${mem_flag[@]}" \
    --stats-json "$2" >/dev/null 2>>"$work/run-stderr.txt"
}
echo "== run --prompt-ids 1 and 1..64 --max-new 1 --stats-json (the prefill's engine-counted bytes)"
t0=$(now)
set +e
run_stats 1 "$work/one.json"
rc1=$?
run_stats "$(seq -s, 1 64)" "$work/wave.json"
rc64=$?
set -e
t1=$(now)
grep -E "prefill wave|prompt " "$work/run-stderr.txt" || true
check '[[ $rc1 == 0 && $rc64 == 0 ]]' "deltafin run exited with $rc1 (1 token) and $rc64 (64 tokens)"
if [[ $rc1 == 0 && $rc64 == 0 ]]; then
  wave_check=$(python3 - "$work/one.json" "$work/wave.json" "$work/run-stderr.txt" <<'PY'
import json, re, sys
one = json.load(open(sys.argv[1]))["steps"][0]
wave = json.load(open(sys.argv[2]))["steps"][0]
sizes = [int(m) for m in re.findall(r"prefill wave: (\d+) positions", open(sys.argv[3]).read())]
print(f"64-token prefill: {wave['seconds']:.1f} s, expert bytes read {wave['expert_bytes_read']} "
      f"(distinct experts {wave['expert_bytes_needed']}), spine bytes {wave['spine_bytes_read']} "
      f"(a 1-token prompt: {one['spine_bytes_read']}); planned wave {sizes[-1] if sizes else '?'}")
ok = (wave["kind"] == "prefill" and sizes and sizes[-1] >= 64
      and wave["expert_bytes_read"] == wave["expert_bytes_needed"] > 0
      and wave["spine_bytes_read"] == one["spine_bytes_read"] > 0)
print("ONE-PASS" if ok else "NOT-ONE-PASS")
PY
  )
  echo "$wave_check"
  check '[[ $wave_check == *ONE-PASS && $wave_check != *NOT-ONE-PASS ]]' \
    "the 64-token prefill did not read the experts and the spine once"
fi
echo "runs: $(secs "$t0" "$t1") s"
peak=$(cat "$peak_file" 2>/dev/null || echo 0)
check '[[ $peak -gt 0 && $peak -le $limit_bytes ]]' "peak memory $peak outside (0, $limit_bytes]"

if [[ $got == "$want" ]] && cmp -s -n "$want" "$logits" /dev/zero; then
  echo "logits: all zero (as expected of a model whose weights are all zero)"
fi
if [[ $fail != 0 ]]; then
  echo "FAIL"
  exit 1
fi
echo "PASS: generation ${gen_s} s, logits ${run_s} s, peak $peak of $limit_bytes bytes"
