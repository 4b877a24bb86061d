#!/usr/bin/env bash
# The trained demo model (models/k3-kjv-demo, training/README.md) through two independent K3
# implementations: the PyTorch model of training/k3_torch.py (float64, MXFP4 experts decoded
# exactly) and `deltafin logits` must agree to 1e-4 at every position of several sequences, and
# both tokenizers must give the same ids; first, the PyTorch model must reproduce the golden tiny
# checkpoint's reference logits (tests/data/golden). Needs python3 with torch and numpy (Debian:
# python3-torch python3-numpy); without them the test is skipped (exit 77), not failed.
set -euo pipefail
deltafin=$1
model=$2
here=$(cd "$(dirname "$0")/../.." && pwd)
# The first python3 on PATH may be one without torch (e.g. a pyenv build); Debian's has it.
for py in /usr/bin/python3 python3; do
  if command -v "$py" >/dev/null && "$py" -c 'import torch, numpy' 2>/dev/null; then
    export OPENBLAS_NUM_THREADS=1
    exec "$py" "$here/training/check_agreement.py" --deltafin "$deltafin" --model "$model" \
      --golden "$here/tests/data/golden"
  fi
done
echo "SKIP: no python3 with torch and numpy (apt-get install python3-torch python3-numpy)"
exit 77
