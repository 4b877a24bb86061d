#!/usr/bin/env bash
# Issue 35 acceptance numbers: the I/O part of a decode step (bench decode's expert I/O wait per
# token, scenario stream-spine-resident) with experts on one throttled loop device, on two of
# equal speed, and on two at 2:1 speed with every expert on both.
#
#   tools/spread_bench.sh [path/to/deltafin] [MODEL_DIR]
#
# MODEL_DIR (default: a generated `make-model --preset bench --set
# num_hidden_layers=$DF_SPREAD_LAYERS`, default 6, under /var/tmp: the bench preset's expert size
# and routing with fewer layers, so three copies and two drive images fit). The model is copied into
# three folders spread differently: m1 on drive A alone, m2 on A and B (every expert on both), m3
# on B alone (DF_SPREAD_ONE_FOLDER=1: one folder, spread onto A, then copied onto B as well; see
# below). The drives are 2 loop devices on ext4 images, throttled per device through cgroup v1
# blkio.throttle.read_bps_device at DF_SPREAD_MBPS (default 40) MB/s, A at twice that for the
# 2:1 runs. Each placement's logits of an 8-token prompt (experts streamed) must equal the
# unspread model's (experts mapped) byte for byte. Needs root; always removes its loop devices, mounts, cgroup and copies (trap).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
deltafin=${1:-$here/build/release/src/cli/deltafin}
src_model=${2:-}
rate=$((${DF_SPREAD_MBPS:-40} * 1000000))
layers=${DF_SPREAD_LAYERS:-6}
steps=${DF_SPREAD_STEPS:-12}
blkio=/sys/fs/cgroup/blkio
[[ $(id -u) == 0 ]] || { echo "SKIP: needs root"; exit 77; }
[[ -w $blkio/blkio.throttle.read_bps_device ]] || { echo "SKIP: no cgroup v1 blkio"; exit 77; }

work=$(mktemp -d /var/tmp/deltafin-spreadbench-XXXXXX)
cg=$blkio/deltafin-spreadbench-$$
loops=()
cleanup() {
  set +e
  for m in "$work"/mnt/*; do mountpoint -q "$m" && umount -l "$m"; done
  for l in "${loops[@]}"; do losetup -d "$l" 2>/dev/null; done
  [[ -d $cg ]] && rmdir "$cg"
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/mnt" "$cg"

if [[ -z $src_model ]]; then
  src_model=$work/gen
  "$deltafin" make-model --preset bench --set num_hidden_layers="$layers" --seed 5 --no-sync \
    --out "$src_model" >/dev/null
fi
expert_bytes=$(du -sb --apparent-size "$src_model" | cut -f1)
img_bytes=$(((expert_bytes * 2 + (512 << 20)) >> 20 << 20))
# One model folder (DF_SPREAD_ONE_FOLDER=1, for a model too big for three copies and two drive
# images, such as the full bench preset's 17 GB): spread onto A alone (the one-drive and slow-drive
# runs, A throttled to the slow rate), then a copy of every expert added on B (the two-drive runs).
one_folder=${DF_SPREAD_ONE_FOLDER:-0}
[[ $one_folder == 1 ]] && img_bytes=$(((expert_bytes + (512 << 20)) >> 20 << 20))

make_drive() {  # sets $dev (not in a subshell, so the cleanup sees the loop device)
  truncate -s "$img_bytes" "$work/$1.img"
  dev=$(losetup -f --show "$work/$1.img")
  loops+=("$dev")
  mkfs.ext4 -q "$dev"
  mkdir -p "$work/mnt/$1"
  mount "$dev" "$work/mnt/$1"
}
majmin() { printf '%d:%d' "0x$(stat -c %t "$1")" "0x$(stat -c %T "$1")"; }
throttle() {  # throttle A_BPS B_BPS
  echo "$(majmin "$dev_a") $1" >"$cg/blkio.throttle.read_bps_device"
  echo "$(majmin "$dev_b") $2" >"$cg/blkio.throttle.read_bps_device"
}
make_drive a
dev_a=$dev
make_drive b
dev_b=$dev
if [[ $one_folder == 1 ]]; then
  cp -r "$src_model" "$work/m"
  rm -f "$work/m/.deltafin/placement.json"
  "$deltafin" spread --model "$work/m" --drive "$work/mnt/a/m" --move
else
  for m in m1 m2 m3; do cp -r "$src_model" "$work/$m"; rm -f "$work/$m/.deltafin/placement.json"; done
  "$deltafin" spread --model "$work/m1" --drive "$work/mnt/a/m1" --move
  "$deltafin" spread --model "$work/m2" --drive "$work/mnt/a/m2" --drive "$work/mnt/b/m2" --copies 2 --move
  "$deltafin" spread --model "$work/m3" --drive "$work/mnt/b/m3" --move
fi

bench() {  # bench NAME MODEL: expert I/O wait per token and drive split, from bench decode --json
  bash -c 'echo $$ >"$0/cgroup.procs"; exec "$@"' "$cg" "$deltafin" bench decode \
    --model "$2" --scenario stream-spine-resident --steps "$steps" --prompt-tokens 4 \
    --probe-experts 64 --json "$work/$1.json" >/dev/null 2>"$work/$1.err" ||
    { cat "$work/$1.err" >&2; exit 1; }
  python3 - "$work/$1.json" "$1" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
io = j["ops_s_per_token"]["expert_io_wait"]
drives = ", ".join("%s %.1f MB %d reads %.0f%% busy" % (d["path"].split("/")[-2] if d["reads"] else "model",
                    d["bytes_read"] / 1e6, d["reads"], 100 * d["busy_fraction"]) for d in j["drives"])
print("%-18s s/token %.3f  expert io wait %.3f s/token  [%s]" % (sys.argv[2], j["s_per_token"], io, drives))
open(sys.argv[1] + ".io", "w").write(repr(io))
PY
}
ratio() { python3 -c "import sys; print('%.2f' % (float(open(sys.argv[1]).read()) / float(open(sys.argv[2]).read())))" "$work/$1.json.io" "$work/$2.json.io"; }

# Logits of a short prompt with every expert mapped from the source model: every placement below
# must give the same bytes (the drive set reads whichever copy, and copies are byte-identical).
"$deltafin" logits --model "$src_model" --tokens 1,2,3,4,5,6,7,8 --experts mapped \
  --out "$work/ref.f32" >/dev/null 2>&1 || { echo "FAIL: reference logits" >&2; exit 1; }
same_logits() {  # same_logits MODEL: streamed from its placement (outside the throttled cgroup)
  "$deltafin" logits --model "$1" --tokens 1,2,3,4,5,6,7,8 --experts streamed \
    --out "$work/spread.f32" >/dev/null 2>&1 || { echo "FAIL: logits of $1" >&2; exit 1; }
  cmp -s "$work/ref.f32" "$work/spread.f32" || { echo "FAIL: logits of $1 differ" >&2; exit 1; }
  echo "logits of $(basename "$1") ($2): identical to the unspread model's"
}

throttle "$rate" "$rate"
if [[ $one_folder == 1 ]]; then
  same_logits "$work/m" "every expert on drive A only"
  bench one-drive "$work/m"
  # Add a copy of every expert on drive B: the same folder, now on both drives.
  "$deltafin" spread --model "$work/m" --drive "$work/mnt/a/m" --drive "$work/mnt/b/m" --copies 2
  same_logits "$work/m" "every expert on drives A and B"
  bench two-equal "$work/m"
  echo "two equal drives / one: $(ratio two-equal one-drive) (target <= 0.6)"
  # The slow drive alone is drive A alone at the slow rate: the one-drive run above.
  cp "$work/one-drive.json.io" "$work/slow-alone.json.io"
  throttle $((2 * rate)) "$rate"
  bench two-2to1 "$work/m"
else
  same_logits "$work/m1" "drive A only"
  same_logits "$work/m2" "drives A and B"
  same_logits "$work/m3" "drive B only"
  bench one-drive "$work/m1"
  bench two-equal "$work/m2"
  echo "two equal drives / one: $(ratio two-equal one-drive) (target <= 0.6)"
  throttle $((2 * rate)) "$rate"
  bench slow-alone "$work/m3"
  bench two-2to1 "$work/m2"
fi
echo "2:1 drives, every expert on both / slow drive alone: $(ratio two-2to1 slow-alone) (target <= 0.4)"
python3 -c '
import json,sys; d=json.load(open(sys.argv[1]))["drives"]; a,b=d[1]["bytes_read"],d[2]["bytes_read"]
print("2:1 split A:B = %.2f" % (a / max(b, 1)))' "$work/two-2to1.json"
