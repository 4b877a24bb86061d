#!/usr/bin/env python3
"""Agreement of the row-int8 spine with the BF16 model (docs/INT8.md).

Runs `deltafin logits` on a fixed set of prompts twice, with --spine bf16 and --spine int8, and
prints the top-1 agreement (argmax equal, ties to the lowest id as the engine does) and the mean
KL(bf16 || int8) of the softmax distributions over every position. Python 3 standard library only.

  tools/int8_agreement.py --deltafin build/release/src/cli/deltafin --model /work/models/bench

The model must have been converted first (`deltafin convert-spine-int8 --model DIR`).
`--tokens-file FILE` uses real sequences instead (one comma-separated id list per line), e.g. the
held-out windows training/eval_nll.py writes for the trained demo model.
"""
import argparse
import array
import math
import os
import shutil
import subprocess
import sys
import tempfile


def prompts(count, length, vocab):
    """Fixed pseudo-random token ids (a linear congruential sequence), the same on every run."""
    out, x = [], 12345
    for _ in range(count):
        ids = []
        for _ in range(length):
            x = (1103515245 * x + 12345) % (1 << 31)
            ids.append(x % vocab)
        out.append(ids)
    return out


def run_logits(binary, model, ids, spine, path, extra):
    cmd = [binary, "logits", "--model", model, "--tokens", ",".join(map(str, ids)),
           "--out", path, "--spine", spine] + extra
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd[:4])} ... --spine {spine} failed:\n{done.stdout}")
    data = array.array("f")
    with open(path, "rb") as f:
        data.frombytes(f.read())
    if sys.byteorder != "little":
        data.byteswap()
    return data


def log_softmax(row):
    m = max(row)
    s = math.fsum(math.exp(v - m) for v in row)
    lse = m + math.log(s)
    return [v - lse for v in row]


def argmax(row):
    best = 0
    for i in range(1, len(row)):
        if row[i] > row[best]:
            best = i
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--deltafin",
                    default=shutil.which("deltafin") or "build/release/src/cli/deltafin")
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=16, help="tokens per prompt")
    ap.add_argument("--vocab-limit", type=int, default=0,
                    help="draw ids below this (0: the model's vocab from config.json)")
    ap.add_argument("--extra", default="", help="extra arguments for deltafin logits")
    ap.add_argument("--tokens-file", default="",
                    help="sequences to score, one comma-separated id list per line")
    args = ap.parse_args()

    vocab = args.vocab_limit
    if vocab <= 0:
        import json
        with open(os.path.join(args.model, "config.json")) as f:
            cfg = json.load(f)
        vocab = cfg.get("text_config", cfg)["vocab_size"]
    extra = args.extra.split() if args.extra else []
    agree = total = 0
    kl_sum = 0.0
    kl_max = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        if args.tokens_file:
            with open(args.tokens_file) as f:
                sequences = [[int(t) for t in line.split(",")] for line in f if line.strip()]
        else:
            sequences = prompts(args.prompts, args.tokens, vocab)
        for p, ids in enumerate(sequences):
            a = run_logits(args.deltafin, args.model, ids, "bf16", os.path.join(tmp, "a"), extra)
            b = run_logits(args.deltafin, args.model, ids, "int8", os.path.join(tmp, "b"), extra)
            v = len(a) // len(ids)
            p_agree = 0
            for t in range(len(ids)):
                ra, rb = a[t * v:(t + 1) * v], b[t * v:(t + 1) * v]
                same = argmax(ra) == argmax(rb)
                p_agree += same
                la, lb = log_softmax(ra), log_softmax(rb)
                kl = math.fsum(math.exp(x) * (x - y) for x, y in zip(la, lb))
                kl_sum += kl
                kl_max = max(kl_max, kl)
            agree += p_agree
            total += len(ids)
            identical = a.tobytes() == b.tobytes()
            print(f"prompt {p}: top-1 agreement {p_agree}/{len(ids)}"
                  f"{' (logits byte-identical!)' if identical else ''}", flush=True)
    print(f"top-1 agreement: {agree}/{total} = {100.0 * agree / total:.1f}%")
    print(f"mean KL(bf16 || int8): {kl_sum / total:.6f} nats (max {kl_max:.6f})")


if __name__ == "__main__":
    main()
