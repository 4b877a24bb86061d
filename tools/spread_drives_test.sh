#!/usr/bin/env bash
# Issue 35 on real devices: a model spread over two drives made from loop devices, each read-rate
# limited by the cgroup v1 blkio controller (blkio.throttle.read_bps_device on the loop device's
# major:minor, for a cgroup the engine runs in), so the drives really differ in speed.
#
#   tools/spread_drives_test.sh [path/to/deltafin]
#
# 1. Two 256 MiB ext4 images on /dev/loop*, mounted; `make-model --preset tiny`; its logits and a
#    generated token list with mapped experts are the reference.
# 2. `spread --copies 2 --move` puts every expert on both drives; drive A reads at 2x drive B's
#    rate. `run --stats-json` of a 48-token prompt must generate the same tokens and split the
#    bytes close to 2:1, within 1.6-2.6 (the drive set sends each read to the drive expected to
#    finish first, waiting for the fast drive when its queue is full and it would still finish
#    sooner).
# 3. A device failed mid-run: while a run decodes, drive B's image is cut to 1 MiB and its loop
#    device resized (`losetup -c`), so every later read of B is an I/O error. With copies the run
#    ends with the same tokens and a warning naming B; with every expert on one drive only (spread
#    --copies 1 --move over A and B), the run ends with a one-line error naming the drive, file
#    and offset, and exit status 1.
# Before 2, `plan --drive` measures drive B (not in the placement yet) at its throttled rate.
# Needs root, losetup, mkfs.ext4 and cgroup v1 blkio; otherwise it exits 77 (ctest's skip code).
# Loop devices, mounts and the cgroup are always removed (trap). About 20 s.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
deltafin=${1:-$here/build/release/src/cli/deltafin}
blkio=/sys/fs/cgroup/blkio

[[ -x "$deltafin" ]] || { echo "FAIL: no deltafin binary at $deltafin" >&2; exit 1; }
[[ $(id -u) == 0 ]] || { echo "SKIP: loop devices and blkio throttling need root"; exit 77; }
for tool in losetup mkfs.ext4 mount umount; do
  command -v $tool >/dev/null || { echo "SKIP: no $tool"; exit 77; }
done
[[ -w $blkio/blkio.throttle.read_bps_device ]] || { echo "SKIP: no cgroup v1 blkio at $blkio"; exit 77; }

work=$(mktemp -d /var/tmp/deltafin-spread-XXXXXX)
cg=$blkio/deltafin-spread-$$
loops=()
cleanup() {
  set +e
  for m in "$work"/mnt/*; do mountpoint -q "$m" && umount -l "$m"; done
  for l in "${loops[@]}"; do losetup -d "$l" 2>/dev/null; done
  [[ -d $cg ]] && rmdir "$cg"
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/mnt"
if ! losetup -f >/dev/null 2>&1; then echo "SKIP: no free loop device"; exit 77; fi

# make_drive NAME [SIZE]: an ext4 image (default 256 MiB, sparse) on a loop device, mounted at
# $work/mnt/NAME; sets $dev. (Not run in a subshell, so the cleanup's list of loop devices sees it.)
make_drive() {
  truncate -s "${2:-256M}" "$work/$1.img"
  dev=$(losetup -f --show "$work/$1.img")
  loops+=("$dev")
  mkfs.ext4 -q "$dev"
  mkdir -p "$work/mnt/$1"
  mount "$dev" "$work/mnt/$1"
}
majmin() { printf '%d:%d' "0x$(stat -c %t "$1")" "0x$(stat -c %T "$1")"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

make_drive a
dev_a=$dev
make_drive b
dev_b=$dev
mkdir "$cg"
# Bytes per second: drive A twice drive B.
echo "$(majmin "$dev_a") 4000000" >"$cg/blkio.throttle.read_bps_device"
echo "$(majmin "$dev_b") 2000000" >>"$cg/blkio.throttle.read_bps_device"
# in_cgroup CMD...: runs CMD inside the throttled cgroup.
in_cgroup() { bash -c 'echo $$ >"$0/cgroup.procs"; exec "$@"' "$cg" "$@"; }

model=$work/model
"$deltafin" make-model --preset tiny --seed 11 --no-sync --out "$model" >/dev/null
"$deltafin" logits --model "$model" --tokens 5,6,7,8,9 --experts mapped --out "$work/base.f32" 2>/dev/null
base_args=(run --model "$model" --prompt-ids "5,6,7" --ignore-eos)
run_args=("${base_args[@]}" --expert-cache 1M --io-threads 4)
# The split run prefills a 48-token prompt: its wave asks for most of each layer's experts at
# once, so both drives stay busy and the bytes follow their speeds. (A decode step asks for 4
# experts a layer: the fast drive alone finishes them sooner, and the split leans further its way,
# 2.3-3.9 : 1 in runs here, as the expected completion times say it should.)
long_ids=$(python3 -c 'print(",".join(str(5 + (i * 37) % 400) for i in range(48)))')
long_args=(run --model "$model" --prompt-ids "$long_ids" --ignore-eos)
"$deltafin" "${long_args[@]}" --max-new 2 --experts mapped --ids-out "$work/base.ids" >/dev/null 2>&1
"$deltafin" "${base_args[@]}" --max-new 60 --experts mapped --ids-out "$work/base60.ids" >/dev/null 2>&1

# A drive too small for its share: refused before anything is copied.
make_drive small 80M
if "$deltafin" spread --model "$model" --drive "$work/mnt/small" --copies 1 2>"$work/small.err"; then
  fail "spread onto a drive without the space succeeded"
fi
grep -q "^error: not enough space for 1 copy of every expert on $work/mnt/small" "$work/small.err" ||
  { cat "$work/small.err" >&2; fail "no 'not enough space' error"; }
[[ ! -e $model/.deltafin/placement.json ]] || fail "a refused spread left a placement"
echo "a drive too small: $(cat "$work/small.err")"

# `plan --drive` measures a drive that is not in the placement yet through a probe file there:
# B's throttled rate (2 MB/s), not the page cache's; B named again adds nothing.
in_cgroup "$deltafin" plan --model "$model" --quick --drive "$work/mnt/b" --drive "$work/mnt/b" \
  --json "$work/plan.json" >"$work/plan.out" 2>&1 || { cat "$work/plan.out" >&2; fail "plan --drive failed"; }
grep "^drive $work/mnt/b" "$work/plan.out"
python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
drives, g = d["drives"], d["drives"][0]["gbps"]
assert len(drives) == 2 and drives[1]["gbps"] is None, drives
assert drives[1]["same_device_as"] == drives[0]["path"], drives
assert 0 < g < 0.01 and d["profile"]["drive_gbps"] == [g], (g, d["profile"])' "$work/plan.json" ||
  fail "plan --drive did not measure drive B at its throttled rate"
if ls -A "$work/mnt/b" | grep -q deltafin-plan; then fail "plan left its probe file on drive B"; fi

# 2. Every expert on both drives, none on the model folder.
"$deltafin" spread --model "$model" --drive "$work/mnt/a" --drive "$work/mnt/b" --copies 2 --move
"$deltafin" logits --model "$model" --tokens 5,6,7,8,9 --out "$work/spread.f32" 2>/dev/null
cmp -s "$work/base.f32" "$work/spread.f32" || fail "spread logits differ from the model's"
in_cgroup "$deltafin" "${long_args[@]}" --expert-cache 1M --io-threads 4 --max-new 2 \
  --ids-out "$work/two.ids" --stats-json "$work/two.json" 2>/dev/null >/dev/null
cmp -s "$work/base.ids" "$work/two.ids" || fail "spread run generated other tokens"
read -r bytes_a bytes_b < <(python3 -c '
import json,sys; d=json.load(open(sys.argv[1]))["drives"]; print(d[1]["bytes_read"], d[2]["bytes_read"])' "$work/two.json")
echo "2:1 drives: A read $bytes_a bytes, B $bytes_b"
python3 -c 'import sys; a,b=map(int,sys.argv[1:]); r=a/max(b,1); print("split A:B = %.2f" % r); sys.exit(0 if 1.6 <= r <= 2.6 else 1)' \
  "$bytes_a" "$bytes_b" || fail "reads not split about 2:1 between drives of 2:1 speed"

# 3a. Drive B fails mid-run; every expert also on A: same tokens.
fail_b_soon() {
  sleep 1.5
  truncate -s 1M "$work/b.img"
  losetup -c "$dev_b"
}
fail_b_soon &
set +e
in_cgroup "$deltafin" "${run_args[@]}" --max-new 60 --ids-out "$work/fail.ids" >/dev/null 2>"$work/fail.err"
status=$?
set -e
wait
[[ $status == 0 ]] || { cat "$work/fail.err" >&2; fail "the run with copies failed when drive B did"; }
grep -q "drive $work/mnt/b failed a read" "$work/fail.err" ||
  { cat "$work/fail.err" >&2; fail "no warning naming the failed drive"; }
cmp -s "$work/base60.ids" "$work/fail.ids" || fail "the run whose drive failed generated other tokens"
echo "drive B failed mid-run with copies on A: same tokens"

# 3b. One copy of each expert (half on A, half on B): B failing ends the run with one error line.
umount -l "$work/mnt/b"
losetup -d "$dev_b"
make_drive b2
dev_b=$dev
echo "$(majmin "$dev_b") 2000000" >>"$cg/blkio.throttle.read_bps_device"
model2=$work/model2
"$deltafin" make-model --preset tiny --seed 11 --no-sync --out "$model2" >/dev/null
"$deltafin" spread --model "$model2" --drive "$work/mnt/a" --drive "$work/mnt/b2" --copies 1 --move
(sleep 1.5; truncate -s 1M "$work/b2.img"; losetup -c "$dev_b") &
set +e
in_cgroup "$deltafin" run --model "$model2" --prompt-ids 5,6,7 --max-new 400 --ignore-eos \
  --expert-cache 1M --io-threads 4 >/dev/null 2>"$work/fail2.err"
status=$?
set -e
wait
[[ $status == 1 ]] || { cat "$work/fail2.err" >&2; fail "exit status $status, not 1, with no copy left"; }
[[ $(grep -c '^error: ' "$work/fail2.err") == 1 ]] || { cat "$work/fail2.err" >&2; fail "not one error line"; }
# This read's failure, or (when another reader thread hit the drive first) the earlier one's.
grep '^error: ' "$work/fail2.err" |
  grep -qE "no readable copy left: drive $work/mnt/b2(: | failed an earlier read \()$work/mnt/b2/.*offset" ||
  { cat "$work/fail2.err" >&2; fail "the error does not name the drive, file and offset"; }
grep '^error: ' "$work/fail2.err"
echo "PASS"
