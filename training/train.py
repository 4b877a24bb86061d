"""Train the K3-architecture demo model on the King James Bible, from scratch, on the CPU.

    /usr/bin/python3 training/train.py --work training/work --steps 3200 --seed 1

Stages (the first is cached in --work and reused by later runs):
  1. corpus + BPE vocabulary + token ids (training/bpe.py);
  2. training: AdamW with warm-up and cosine decay, gradient clipping, K3's auxiliary-loss-free
     router balancing (the correction bias of each MoE layer moves by a fixed rate towards equal
     expert load after every step), fixed-length windows drawn at random from the training ids by
     a generator seeded from --seed;
  3. checkpoints `--work/ckpt-<step>.pt` every --ckpt-every steps and `--work/final.pt`.
Export to the Hugging Face layout is training/export.py.

A second stage (`--init` with `--copy-fraction`) fine-tunes a trained model on a mix of plain
windows and *copy windows*: a passage, other text, then the passage again, so the model learns to
continue a passage it has already seen in its context (the skill prompt-lookup speculation and
any quoting user rely on), and with `--repeat-fraction` on windows of a random passage repeated
(the lookup with no other way to predict it); training/README.md has the recipes and results.

Everything is a pure function of the arguments: the seed fixes the initial weights and the data
order, torch runs with a fixed thread count, so two runs write bit-identical checkpoints
(training/README.md says how this was checked).
"""

import argparse
import json
import math
import os
import sys
import time

# OpenBLAS's own worker threads busy-wait for each other; on a loaded machine every matrix product
# then waits for a time slice (measured here: 6x slower). torch's threads do the parallel work.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import k3_checkpoint  # noqa: E402
import k3_torch  # noqa: E402
import model_config  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN_TOKENIZER_CONFIG = os.path.join(HERE, "..", "tests", "data", "golden", "tiny-k3",
                                       "tokenizer_config.json")


def prepare(work, num_ranks):
    """Corpus splits, vocabulary and token ids, cached in `work`."""
    os.makedirs(work, exist_ok=True)
    paths = {k: os.path.join(work, k) for k in ("train.txt", "val.txt", "tiktoken.model",
                                                 "train.u16", "val.u16")}
    if not os.path.exists(paths["val.u16"]):
        train_text, val_text = bpe.kjv_splits()
        open(paths["train.txt"], "w").write(train_text)
        open(paths["val.txt"], "w").write(val_text)
        vocab = bpe.train_bpe(train_text, num_ranks)
        bpe.write_tokenizer_files(vocab, work, GOLDEN_TOKENIZER_CONFIG, 4096)
        tok = bpe.Tokenizer(vocab)
        np.array(tok.encode(train_text), dtype=np.uint16).tofile(paths["train.u16"])
        np.array(tok.encode(val_text), dtype=np.uint16).tofile(paths["val.u16"])
    train = torch.from_numpy(np.fromfile(paths["train.u16"], dtype=np.uint16).astype(np.int64))
    val = torch.from_numpy(np.fromfile(paths["val.u16"], dtype=np.uint16).astype(np.int64))
    return train, val


def randint(gen, lo, hi):
    """One uniform integer in [lo, hi] (inclusive) from the data generator."""
    return int(torch.randint(lo, hi + 1, (1,), generator=gen))


def copy_window(ids, seq, gen):
    """seq + 1 ids: a passage of the training text, a stretch of other text, then the passage
    again from its start (running on past its end into the text that followed it). The repeat
    starts at a random point so every part of a quote is learnt, not only its opening words."""
    passage = randint(gen, 16, seq // 2)
    gap = randint(gen, 0, seq - 2 * passage)
    a = randint(gen, 0, len(ids) - seq - 2)
    g = randint(gen, 0, len(ids) - gap - 1)
    rest = seq + 1 - passage - gap
    window = torch.cat([ids[a:a + passage], ids[g:g + gap], ids[a:a + rest]])
    return window, passage + gap, passage


def repeat_window(seq, gen, ranks):
    """seq + 1 ids: a passage of 8 to seq / 4 uniform random ids below `ranks`, repeated until the
    window is full. Nothing but looking the passage up predicts its repeats, so these windows
    teach the lookup itself (an induction mechanism) with most positions as targets."""
    passage = randint(gen, 8, seq // 4)
    text = torch.randint(0, ranks, (passage,), generator=gen)
    return text.repeat((seq + 1 + passage - 1) // passage)[:seq + 1], passage


class ChatFrames:
    """Windows in K3's chat frame (docs/CHAT.md; what `deltafin serve` renders with thinking off):
    a user turn holding one or two verses, then an assistant turn whose response is the verses
    that follow them, turn after turn until the window is full. The model never sees the frame's
    special tokens in the Bible text, so without these windows it treats a chat prompt as noise,
    and a model that copies from its context copies the frame."""

    def __init__(self, work, train_text, tokenizer):
        config = json.load(open(os.path.join(work, "tokenizer_config.json")))
        special = {v["content"]: int(k) for k, v in config["added_tokens_decoder"].items()}
        self.verses = [v for v in train_text.split("\n") if v]
        self.encode = tokenizer.encode
        def frame(*parts):  # special-token names and plain text, in order
            ids = []
            for part in parts:
                ids += [special[part]] if part in special else tokenizer.encode(part)
            return ids
        o, sep, c, end = "<|open|>", "<|sep|>", "<|close|>", "<|end_of_msg|>"
        self.user_open = frame(o, 'message role="user"', sep)
        self.user_close = frame(c, "message", sep, end)
        self.answer_open = frame(o, 'message role="assistant"', sep, o, "response", sep)
        self.answer_close = frame(c, "response", sep, c, "message", sep, end)

    def window(self, seq, gen):
        ids = []
        while len(ids) < seq + 1:
            i = randint(gen, 0, len(self.verses) - 8)
            asked, answered = randint(gen, 1, 2), randint(gen, 1, 4)
            question = "\n".join(self.verses[i:i + asked])
            answer = "\n".join(self.verses[i + asked:i + asked + answered])
            ids += (self.user_open + self.encode(question) + self.user_close + self.answer_open
                    + self.encode(answer) + self.answer_close)
        return torch.tensor(ids[:seq + 1], dtype=torch.int64)


@torch.no_grad()
def evaluate_copy(model, ids, seq, windows=16):
    """Greedy top-1 accuracy on the repeated passage of fixed copy windows of held-out text, over
    the positions whose next id is still inside the passage (what a quoting prompt asks of it)."""
    model.eval()
    gen = torch.Generator().manual_seed(1234)
    hits, count = 0, 0
    for _ in range(windows):
        w, repeat, passage = copy_window(ids, seq, gen)
        # Row t predicts w[t + 1]; from the repeat's first id on, the rest of the passage is in
        # the context.
        rows = slice(repeat, min(repeat + passage - 1, seq))
        pred = model(w[:-1].unsqueeze(0))[0].argmax(-1)
        hits += int((pred[rows] == w[1:][rows]).sum())
        count += pred[rows].numel()
    model.train()
    return hits / count


@torch.no_grad()
def evaluate_repeat(model, seq, ranks, windows=16):
    """Greedy top-1 accuracy on the repeats of fixed repeat_window windows: 0 for a model that does
    not look its context up, near 1 for one that copies."""
    model.eval()
    gen = torch.Generator().manual_seed(1234)
    hits, count = 0, 0
    for _ in range(windows):
        w, passage = repeat_window(seq, gen, ranks)
        pred = model(w[:-1].unsqueeze(0))[0].argmax(-1)
        # Row t predicts w[t + 1]; from row `passage` on, that id is already in the context.
        hits += int((pred[passage:] == w[1:][passage:]).sum())
        count += pred[passage:].numel()
    model.train()
    return hits / count


@torch.no_grad()
def induction_init(model, layer, ngram=1, tap=1.0):
    """Start KDA layer `layer` as a lookup of "what followed this context last time": the query and
    key projections are one matrix; in the i-th of `ngram` equal channel groups the query
    convolution passes position t - i and the key convolution position t - i - 1, and the value
    convolution passes the current position. So the delta rule stores (the `ngram` ids before
    position j -> id j) and the query of the last `ngram` ids retrieves what followed them before.
    `tap` is the convolution weight (small keeps SiLU near-linear, so unrelated contexts score
    near 0). The decay starts near 1 (memories of hundreds of tokens). Everything stays
    trainable: this only places the start where gradient descent does not find the mechanism from
    a random start in the steps a CPU affords (training/README.md)."""
    attn = model.layers[layer].self_attn
    if not isinstance(attn, k3_torch.KimiDeltaAttention):
        raise SystemExit(f"--induction-layer {layer} is not a KDA layer")
    taps = attn.q_conv1d.shape[-1]
    if not 1 <= ngram <= taps - 1:
        raise SystemExit(f"--induction-ngram must be 1..{taps - 1}")
    for conv in (attn.q_conv1d, attn.k_conv1d, attn.v_conv1d):
        conv.zero_()
    channels = attn.q_conv1d.shape[0]
    for i in range(ngram):
        group = slice(i * channels // ngram, (i + 1) * channels // ngram)
        attn.q_conv1d[group, 0, taps - 1 - i] = tap
        attn.k_conv1d[group, 0, taps - 2 - i] = tap
    attn.v_conv1d[:, 0, taps - 1] = tap
    attn.k_proj.weight.copy_(attn.q_proj.weight)
    attn.dt_bias.fill_(-8.0)
    attn.b_proj.weight.zero_()  # write strength sigmoid(0) = 0.5 for every token


def param_groups(model, weight_decay):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        # Matrices decay; norms, gate biases, decay rates, convolutions and AttnRes queries do not.
        matrix = p.dim() >= 2 and "conv1d" not in name and "res.proj" not in name
        (decay if matrix else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


@torch.no_grad()
def evaluate(model, ids, seq_len, max_tokens=None):
    """Mean next-token NLL (nats) over consecutive windows of the validation ids."""
    model.eval()
    n = len(ids) - 1 if max_tokens is None else min(len(ids) - 1, max_tokens)
    total, count = 0.0, 0
    for start in range(0, n - 1, seq_len):
        end = min(start + seq_len, n)
        x = ids[start:end].unsqueeze(0)
        y = ids[start + 1:end + 1].unsqueeze(0)
        logits = model(x)
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                                 reduction="sum").item()
        count += y.numel()
    model.train()
    return total / count


def lr_at(step, steps, peak, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", default=os.path.join(HERE, "work"))
    ap.add_argument("--steps", type=int, default=3200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--bias-rate", type=float, default=1e-3,
                    help="aux-loss-free balancing: correction-bias step per update")
    ap.add_argument("--num-ranks", type=int, default=2816)
    # One thread: on this shared 2-core VM two torch threads made a step 6-10x slower (each
    # OpenMP barrier waits for a time slice), training/README.md.
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--eval-tokens", type=int, default=4096)
    ap.add_argument("--dims", default="{}", help="JSON overrides of model_config.DIMS")
    ap.add_argument("--out", default="final.pt")
    ap.add_argument("--init", default="",
                    help="start from this model (an exported model folder or a .pt checkpoint) "
                         "instead of random weights")
    ap.add_argument("--copy-fraction", type=float, default=0.0,
                    help="share of each batch that is copy windows (copy_window)")
    ap.add_argument("--repeat-fraction", type=float, default=0.0,
                    help="share of each batch that is repeated random passages (repeat_window)")
    ap.add_argument("--chat-fraction", type=float, default=0.0,
                    help="share of each batch that is chat-frame windows (ChatFrames)")
    ap.add_argument("--induction-layer", type=int, default=-1,
                    help="start this KDA layer as a previous-token lookup (induction_init)")
    ap.add_argument("--induction-ngram", type=int, default=1,
                    help="ids of context the lookup's keys start with (induction_init)")
    ap.add_argument("--induction-tap", type=float, default=1.0,
                    help="the lookup's convolution weight at the start (induction_init)")
    ap.add_argument("--stop-after", type=int, default=0,
                    help="end after this many steps of the --steps schedule (reproducibility checks)")
    args = ap.parse_args()
    if args.copy_fraction + args.repeat_fraction + args.chat_fraction > 1:
        ap.error("--copy-fraction, --repeat-fraction and --chat-fraction add up to more than "
                 "the whole batch")

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    train_ids, val_ids = prepare(args.work, args.num_ranks)
    chat = None
    if args.chat_fraction > 0:
        chat = ChatFrames(args.work, open(os.path.join(args.work, "train.txt")).read(),
                          bpe.Tokenizer(bpe.read_tiktoken(os.path.join(args.work, "tiktoken.model"))))
    config = model_config.demo_config(args.num_ranks, json.loads(args.dims))
    with open(os.path.join(args.work, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    cfg = k3_torch.K3Config(config)
    model = k3_torch.K3Model(cfg)
    if args.init.endswith(".pt"):
        model.load_state_dict(torch.load(args.init)["model"])
    elif args.init:
        k3_checkpoint.load_into(model, k3_checkpoint.read_checkpoint(args.init))
    if args.induction_layer >= 0:
        induction_init(model, args.induction_layer, args.induction_ngram, args.induction_tap)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"params {n_params:,}  train tokens {len(train_ids):,}  val tokens {len(val_ids):,}",
          flush=True)
    opt = torch.optim.AdamW(param_groups(model, args.weight_decay), lr=args.lr,
                            betas=(0.9, 0.95), eps=1e-8)
    data_gen = torch.Generator().manual_seed(args.seed)
    warmup = max(1, args.steps // 20)
    start = time.time()
    log = []
    for step in range(args.steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, args.steps, args.lr, warmup)
        offsets = torch.randint(0, len(train_ids) - args.seq - 1, (args.batch,),
                                generator=data_gen)
        n_copy = round(args.batch * args.copy_fraction)
        n_repeat = round(args.batch * args.repeat_fraction)
        n_chat = round(args.batch * args.chat_fraction)
        # Plain windows keep the offsets after the copy windows' share (as before repeats existed).
        plain = offsets.tolist()[n_copy:args.batch - n_repeat - n_chat]
        windows = [train_ids[o:o + args.seq + 1] for o in plain]
        windows += [copy_window(train_ids, args.seq, data_gen)[0] for _ in range(n_copy)]
        windows += [repeat_window(args.seq, data_gen, args.num_ranks)[0] for _ in range(n_repeat)]
        windows += [chat.window(args.seq, data_gen) for _ in range(n_chat)]
        batch = torch.stack(windows)
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        model.update_router_bias(args.bias_rate)
        done = step + 1
        entry = {"step": done, "loss": round(loss.item(), 4),
                 "seconds": round(time.time() - start, 1)}
        if done % args.eval_every == 0 or done == args.steps:
            entry["val"] = round(evaluate(model, val_ids, 256, args.eval_tokens), 4)
            if args.copy_fraction > 0:
                entry["copy_acc"] = round(evaluate_copy(model, val_ids, args.seq), 4)
            if args.repeat_fraction > 0:
                entry["repeat_acc"] = round(evaluate_repeat(model, args.seq, args.num_ranks), 4)
            tokens = done * args.batch * args.seq
            entry["tokens_per_s"] = round(tokens / (time.time() - start), 1)
        if "val" in entry or done % 10 == 0:
            print(json.dumps(entry), flush=True)
        log.append(entry)
        if done % args.ckpt_every == 0 or done == args.steps:
            path = os.path.join(args.work, args.out if done == args.steps else f"ckpt-{done}.pt")
            torch.save({"config": config, "model": model.state_dict(), "step": done}, path + ".tmp")
            os.replace(path + ".tmp", path)
        if done == args.stop_after:
            break
    with open(os.path.join(args.work, args.out.replace(".pt", "-log.json")), "w") as f:
        json.dump(log, f)
    print(f"done in {time.time() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
