#!/usr/bin/env bash
# The main job on the bundled demo model (README): builds deltafin and continues a prompt with
# models/k3-kjv-demo, a small model with Kimi K3's architecture trained on the King James Bible
# (training/README.md): its text printed as it is generated.
# DF_DEMO_MODEL picks another model folder; DF_DEMO_PROMPT and DF_DEMO_MAX_NEW change the prompt
# and the length. (make-model still writes random-weight K3-shaped models for tests and benchmarks.)
# Greedy decoding of this small model falls into loops ("nor to the house of Israel" five times
# for the default prompt), so the demo adds a repetition penalty (llama-server semantics over the
# last 64 tokens, prompt included): 1.3 is the smallest of 1.1 / 1.2 / 1.3 whose 48 tokens do not
# loop. DF_DEMO_REPEAT_PENALTY=1 shows the plain greedy text.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh
cmake --preset release -DDF_BUILD_TESTS=OFF >/dev/null
cmake --build --preset release -j "$(nproc)" --target deltafin
bin=build/release/src/cli/deltafin
model=${DF_DEMO_MODEL:-models/k3-kjv-demo}
if [[ ! -f "$model/config.json" ]]; then
  echo "demo: no model in $model (DF_DEMO_MODEL names a K3 model folder)" >&2
  exit 1
fi
"$bin" run --model "$model" --prompt "${DF_DEMO_PROMPT:-And God said unto Moses,}" \
  --max-new "${DF_DEMO_MAX_NEW:-48}" --repeat-penalty "${DF_DEMO_REPEAT_PENALTY:-1.3}"
