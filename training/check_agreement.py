"""Compare the PyTorch K3 implementation with `deltafin logits` on an exported checkpoint.

    /usr/bin/python3 training/check_agreement.py --deltafin build/release/src/cli/deltafin \
        --model models/k3-kjv-demo [--tolerance 1e-4]

Loads the checkpoint's safetensors with training/k3_checkpoint.py (MXFP4 experts decoded
exactly), runs training/k3_torch.py in its exact mode (token-by-token KDA recurrence, ties in the
router to the lower expert id) in float64, and for several sequences of held-out text compares
every position's logits with the engine's fp32 logits: max |difference| must be <= tolerance.
It also checks that the Python encoder of training/bpe.py and `deltafin tokenize` give the same
ids for those sequences, so the exported tokenizer is the one the model was trained with.

With --golden DIR (tests/data/golden) it first checks the PyTorch model itself against the golden
reference logits of the tiny checkpoint (fp64 reference, confirmed by two other implementations):
that is what makes it a reference for the engine.

Exit codes: 0 pass, 1 mismatch, 77 torch missing (ctest treats 77 as "skipped").
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError as e:  # a user's machine without python3-torch: skip, do not fail
    print(f"SKIP: {e} (install python3-torch python3-numpy to run this check)")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import k3_checkpoint  # noqa: E402
import k3_torch  # noqa: E402

# Well-known verses (from the training split) and the first verses of the first held-out chapter
# (Genesis 8); the agreement being tested does not depend on which split a text comes from.
TEXTS = [
    "In the beginning God created the heaven and the earth.",
    "And the LORD spake unto Moses, saying,",
    "Blessed are the meek: for they shall inherit the earth. Blessed are they which do hunger "
    "and thirst after righteousness: for they shall be filled.",
    "The LORD is my shepherd; I shall not want. He maketh me to lie down in green pastures: he "
    "leadeth me beside the still waters. He restoreth my soul: he leadeth me in the paths of "
    "righteousness for his name's sake.",
    "And God remembered Noah, and every living thing, and all the cattle that was with him in the "
    "ark: and God made a wind to pass over the earth, and the waters asswaged;",
]


def engine_tokens(deltafin, model, text):
    out = subprocess.run([deltafin, "tokenize", "--model", model], input=text, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def engine_logits(deltafin, model, ids, vocab):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "logits.f32")
        subprocess.run([deltafin, "logits", "--model", model, "--tokens",
                        ",".join(map(str, ids)), "--out", path], check=True,
                       capture_output=True)
        return np.fromfile(path, dtype=np.float32).reshape(len(ids), vocab)


def check_golden(golden, tolerance):
    """The golden tiny checkpoint (grouped routing, 16 experts) against its reference logits."""
    config = json.load(open(os.path.join(golden, "tiny-k3", "config.json")))
    model = k3_torch.K3Model(k3_torch.K3Config(config))
    k3_checkpoint.load_into(model, k3_checkpoint.read_checkpoint(os.path.join(golden, "tiny-k3")))
    model = model.double().eval()
    reference = json.load(open(os.path.join(golden, "reference.json")))
    failures = 0
    for seq in reference["sequences"]:
        want = np.fromfile(os.path.join(golden, seq["file"]), dtype=np.float32).reshape(seq["shape"])
        with torch.no_grad():
            got = model(torch.tensor([seq["ids"]]), exact=True)[0].numpy()
        diff = np.abs(got - want).max()
        print(f"golden {seq['file']}: {len(seq['ids'])} positions, max |torch - reference| "
              f"{diff:.2e}")
        failures += diff > tolerance
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--deltafin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tolerance", type=float, default=1e-4)
    ap.add_argument("--golden", default="", help="also check against tests/data/golden")
    args = ap.parse_args()
    torch.set_num_threads(1)  # see training/README.md ("Threads")
    failures = check_golden(args.golden, args.tolerance) if args.golden else 0

    config = json.load(open(os.path.join(args.model, "config.json")))
    cfg = k3_torch.K3Config(config)
    model = k3_torch.K3Model(cfg)
    k3_checkpoint.load_into(model, k3_checkpoint.read_checkpoint(args.model))
    model = model.double().eval()
    tok = bpe.Tokenizer(bpe.read_tiktoken(os.path.join(args.model, "tiktoken.model")))

    worst = 0.0
    for text in TEXTS:
        ids = tok.encode(text)
        theirs = engine_tokens(args.deltafin, args.model, text)
        if theirs != ids:
            print(f"FAIL tokenizer: python {ids} vs deltafin {theirs} for {text!r}")
            failures += 1
        want = engine_logits(args.deltafin, args.model, ids, cfg.vocab_size)
        with torch.no_grad():
            got = model(torch.tensor([ids]), exact=True)[0].numpy()
        diff = np.abs(got - want).max(axis=1)
        worst = max(worst, diff.max())
        same_argmax = (got.argmax(1) == want.argmax(1)).mean()
        print(f"{len(ids):3d} positions: max |torch - deltafin| {diff.max():.2e} "
              f"(per position max {', '.join(f'{d:.1e}' for d in diff[:6])}...), "
              f"argmax agreement {same_argmax:.0%}")
        if diff.max() > args.tolerance:
            failures += 1
    print(f"worst {worst:.2e} (tolerance {args.tolerance:g}); {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
