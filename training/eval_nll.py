"""Held-out negative log-likelihood of a model, computed from the engine's `deltafin logits`.

    /usr/bin/python3 training/eval_nll.py --deltafin build/release/src/cli/deltafin \
        --model models/k3-kjv-demo --text training/work/val.txt [--window 256] \
        [--write-windows FILE]

Tokenizes the text with `deltafin tokenize` (the model's own tokenizer), cuts the ids into
consecutive windows (each window starts from an empty state, like a fresh prompt), runs
`deltafin logits` on each and prints the mean per-token NLL in nats of every next token, with a
unigram baseline (token frequencies of the same text, i.e. an optimistic unigram model).
--write-windows saves the windows, one comma-separated line each, for tools/int8_agreement.py
--tokens-file and for traces.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--deltafin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument("--max-windows", type=int, default=0, help="0: every window")
    ap.add_argument("--write-windows", default="")
    ap.add_argument("--extra", default="", help="extra arguments for deltafin logits")
    args = ap.parse_args()

    text = open(args.text).read()
    ids = json.loads(subprocess.run([args.deltafin, "tokenize", "--model", args.model],
                                    input=text, check=True, capture_output=True,
                                    text=True).stdout)
    windows = [ids[i:i + args.window] for i in range(0, len(ids) - 1, args.window)]
    windows = [w for w in windows if len(w) >= 2]
    if args.max_windows:
        windows = windows[:args.max_windows]
    if args.write_windows:
        with open(args.write_windows, "w") as f:
            for w in windows:
                f.write(",".join(map(str, w)) + "\n")
    total, count = 0.0, 0
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "logits.f32")
        for w in windows:
            subprocess.run([args.deltafin, "logits", "--model", args.model, "--tokens",
                            ",".join(map(str, w)), "--out", path] + args.extra.split(),
                           check=True, capture_output=True)
            logits = np.fromfile(path, dtype=np.float32).reshape(len(w), -1).astype(np.float64)
            m = logits.max(1, keepdims=True)
            logp = logits - m - np.log(np.exp(logits - m).sum(1, keepdims=True))
            nxt = np.array(w[1:])
            total -= logp[np.arange(len(w) - 1), nxt].sum()
            count += len(w) - 1
    counts = np.bincount(np.concatenate([np.array(w[1:]) for w in windows]))
    p = counts[counts > 0] / counts.sum()
    unigram = -(p * np.log(p)).sum()
    print(json.dumps({"tokens_scored": count, "windows": len(windows), "window": args.window,
                      "mean_nll_nats": round(total / count, 4),
                      "perplexity": round(math.exp(total / count), 2),
                      "unigram_entropy_nats": round(float(unigram), 4)}))


if __name__ == "__main__":
    sys.exit(main())
