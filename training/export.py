"""Export a trained checkpoint (training/train.py's .pt) to K3's Hugging Face layout.

    /usr/bin/python3 training/export.py --work training/work --ckpt final.pt --out models/k3-kjv-demo

Writes config.json, generation_config.json, tiktoken.model, tokenizer_config.json, the
safetensors shards (each below --max-shard-bytes) and model.safetensors.index.json; the routed
experts are quantised to MXFP4 (training/k3_checkpoint.py). Prints the validation loss of the
trained fp32 weights, of the exported weights (BF16 spine + MXFP4 experts) and of fp32 with only
the experts quantised, so the cost of each rounding is visible.
"""

import argparse
import json
import os
import shutil
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # see training/README.md ("Threads")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import k3_checkpoint  # noqa: E402
import k3_torch  # noqa: E402
import train  # noqa: E402


def load_trained(path):
    saved = torch.load(path)
    model = k3_torch.K3Model(k3_torch.K3Config(saved["config"]))
    model.load_state_dict(saved["model"])
    return saved["config"], model


def quantise_experts_(model):
    with torch.no_grad():
        for moe in model.moe_layers():
            for w in (moe.w1, moe.w2, moe.w3):
                for e in range(w.shape[0]):
                    w[e].copy_(torch.from_numpy(k3_checkpoint.mxfp4_roundtrip(w[e].numpy())))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", default=os.path.join(train.HERE, "work"))
    ap.add_argument("--ckpt", default="final.pt")
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-shard-bytes", type=int, default=4_500_000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--skip-eval", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    config, model = load_trained(os.path.join(args.work, args.ckpt))
    os.makedirs(args.out, exist_ok=True)
    for name in os.listdir(args.out):  # a re-export replaces the whole model
        if name.endswith(".safetensors") or name.endswith(".json") or name == "tiktoken.model":
            os.remove(os.path.join(args.out, name))
    files = k3_checkpoint.write_checkpoint(model, args.out, args.max_shard_bytes)
    for name in ("tiktoken.model", "tokenizer_config.json"):
        shutil.copy(os.path.join(args.work, name), os.path.join(args.out, name))
    tc = config["text_config"]
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": tc["bos_token_id"], "eos_token_id": tc["eos_token_id"]}, f,
                  indent=2)
        f.write("\n")
    with open(os.path.join(args.out, "config.json"), "w") as f:  # last: the model is complete
        json.dump(config, f, indent=2)
        f.write("\n")
    sizes = {n: os.path.getsize(os.path.join(args.out, n)) for n in os.listdir(args.out)}
    print(json.dumps({"files": len(sizes), "total_bytes": sum(sizes.values()),
                      "largest": max(sizes.items(), key=lambda kv: kv[1])}))
    if args.skip_eval:
        return

    val = torch.from_numpy(np.fromfile(os.path.join(args.work, "val.u16"),
                                       dtype=np.uint16).astype(np.int64))
    result = {"val_fp32": train.evaluate(model, val, 256)}
    quantise_experts_(model)
    result["val_fp32_spine_mxfp4_experts"] = train.evaluate(model, val, 256)
    exported = k3_torch.K3Model(k3_torch.K3Config(config))
    k3_checkpoint.load_into(exported, k3_checkpoint.read_checkpoint(args.out))
    result["val_exported"] = train.evaluate(exported, val, 256)
    print(json.dumps({k: round(v, 4) for k, v in result.items()}))


if __name__ == "__main__":
    main()
