#!/usr/bin/env bash
# The measurements training/README.md and docs/TRACE.md report for the exported demo model, in
# one place: held-out NLL from `deltafin logits`, torch-vs-engine agreement, a router trace of
# held-out text with trace-stats, and the row-int8 spine's agreement with BF16 on held-out text.
#   training/measure.sh [MODEL_DIR] [OUT_DIR]   (after train.py and export.py)
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-models/k3-kjv-demo}
out=${2:-training/work/measure}
bin=build/release/src/cli/deltafin
py=/usr/bin/python3
export OPENBLAS_NUM_THREADS=1
mkdir -p "$out"
echo "== held-out NLL (deltafin logits, 256-token windows)"
$py training/eval_nll.py --deltafin "$bin" --model "$model" --text training/work/val.txt \
  --write-windows "$out/val_windows.txt" | tee "$out/nll.json"
echo "== PyTorch vs deltafin"
$py training/check_agreement.py --deltafin "$bin" --model "$model" | tee "$out/agreement.txt"
echo "== router trace of the first 1024 held-out tokens"
ids=$(head -4 "$out/val_windows.txt" | paste -sd,)
"$bin" run --model "$model" --prompt-ids "$ids" --max-new 1 --trace "$out/trace.jsonl" >/dev/null
"$bin" trace-stats "$out/trace.jsonl" --json "$out/trace_stats.json" | tee "$out/trace_stats.txt"
echo "== row-int8 spine vs BF16 on 8 held-out windows"
rm -rf "$out/model-int8" && cp -r "$model" "$out/model-int8"  # the conversion writes into it
"$bin" convert-spine-int8 --model "$out/model-int8" >/dev/null
head -8 "$out/val_windows.txt" >"$out/int8_windows.txt"
$py tools/int8_agreement.py --deltafin "$bin" --model "$out/model-int8" \
  --tokens-file "$out/int8_windows.txt" | tee "$out/int8.txt"
