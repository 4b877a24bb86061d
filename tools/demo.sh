#!/usr/bin/env bash
# The main job on the bundled demo model (README): builds deltafin, generates the tiny K3-shaped
# checkpoint (random weights!) with make-model, and generates tokens from it, printing their text
# as they come (meaningless, since the weights are random).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
cmake --preset release -DDF_BUILD_TESTS=OFF >/dev/null
cmake --build --preset release -j "$(nproc)" --target deltafin
bin=build/release/src/cli/deltafin
model=${DF_DEMO_MODEL:-demo-model}
if [[ ! -f "$model/model.safetensors.index.json" ]]; then
  "$bin" make-model --preset tiny --out "$model" --seed 1
fi
"$bin" run --model "$model" --prompt "${DF_DEMO_PROMPT:-The capital of France is}" --max-new 16
