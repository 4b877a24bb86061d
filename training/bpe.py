"""Corpus, byte-level BPE training and encoding for the demo model (K3 tokenizer format).

The corpus is the King James Bible as printed by Debian's `bible` program (package bible-kjv,
text from bible-kjv-text; public domain). Verse references are dropped, verses become lines,
chapters are separated by a blank line. Every 50th chapter (chapter index % 50 == 7) is held out
as the validation split.

The vocabulary is trained on the training split only, with K3's pre-tokenizer: the corpus is pure
ASCII, and on ASCII text K3's pattern (K3 model specification §5.3) is exactly the ASCII pattern below
(the Han and non-ASCII letter/mark classes cannot match). The result is written as K3's
`tiktoken.model` (base64 token, space, rank; ranks 0..255 are the single bytes) plus
`tokenizer_config.json` with K3's 256 special tokens after the ranks. Encoding uses tiktoken's rule
(repeatedly merge the adjacent pair whose concatenation has the lowest rank), so it agrees with the
engine's tokenizer; training/check_agreement.py compares the two on the validation text.
"""

import base64
import collections
import json
import os
import re
import subprocess

# K3's pre-tokenizer restricted to ASCII (alternatives in K3's order).
_CONTRACTION = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
PRETOKENIZE = re.compile(
    r"[^\r\nA-Za-z0-9]?[A-Z]*[a-z]+" + _CONTRACTION
    + r"|[^\r\nA-Za-z0-9]?[A-Z]+[a-z]*" + _CONTRACTION
    + r"|[0-9]{1,3}"
    + r"| ?[^\sA-Za-z0-9]+[\r\n]*"
    + r"|\s*[\r\n]+"
    + r"|\s+(?!\S)"
    + r"|\s+")

VALIDATION_EVERY, VALIDATION_OFFSET = 50, 7


def kjv_chapters():
    """[(reference of the chapter, [verse texts])] in canonical order, from Debian's `bible`."""
    out = subprocess.run(["bible", "-f", "gen1:1-rev22:21"], check=True, capture_output=True,
                         text=True).stdout
    chapters, current = [], None
    for line in out.splitlines():
        m = re.match(r"^(\w+?)(\d+):(\d+) (.*)$", line)
        if not m:
            raise ValueError(f"unexpected line from bible: {line!r}")
        key = m.group(1) + m.group(2)
        if current is None or current[0] != key:
            current = (key, [])
            chapters.append(current)
        current[1].append(m.group(4).strip())
    return chapters


def kjv_splits():
    """(train text, validation text)."""
    train, val = [], []
    for i, (_, verses) in enumerate(kjv_chapters()):
        text = "\n".join(verses) + "\n\n"
        (val if i % VALIDATION_EVERY == VALIDATION_OFFSET else train).append(text)
    return "".join(train), "".join(val)


def train_bpe(text, num_ranks):
    """Byte-level BPE: ranks 0..255 are the bytes, then the most frequent adjacent pair (ties: the
    smaller pair of token ids) is merged until num_ranks distinct tokens exist."""
    words = collections.Counter(PRETOKENIZE.findall(text))
    vocab = [bytes([b]) for b in range(256)]
    rank_of = {t: i for i, t in enumerate(vocab)}
    seqs = [[b for b in w.encode()] for w in words]
    freq = list(words.values())
    pairs = collections.Counter()
    where = collections.defaultdict(set)
    for wi, s in enumerate(seqs):
        for a, b in zip(s, s[1:]):
            pairs[(a, b)] += freq[wi]
            where[(a, b)].add(wi)
    while len(vocab) < num_ranks and pairs:
        best = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        token = vocab[best[0]] + vocab[best[1]]
        if token in rank_of:
            new_id = rank_of[token]
        else:
            new_id = len(vocab)
            vocab.append(token)
            rank_of[token] = new_id
        for wi in list(where[best]):
            s, f = seqs[wi], freq[wi]
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] -= f
                if pairs[(a, b)] <= 0:
                    del pairs[(a, b)]
                where[(a, b)].discard(wi)
            merged, i = [], 0
            while i < len(s):
                if i + 1 < len(s) and (s[i], s[i + 1]) == best:
                    merged.append(new_id)
                    i += 2
                else:
                    merged.append(s[i])
                    i += 1
            seqs[wi] = merged
            for a, b in zip(merged, merged[1:]):
                pairs[(a, b)] += f
                where[(a, b)].add(wi)
        pairs.pop(best, None)
        where.pop(best, None)
    return vocab


class Tokenizer:
    """tiktoken-rule encoder over a rank table (ordinary text only; no special tokens)."""

    def __init__(self, vocab):
        self.vocab = vocab
        self.rank = {t: i for i, t in enumerate(vocab)}
        self.cache = {}

    def _encode_piece(self, piece):
        if piece in self.rank:
            return [self.rank[piece]]
        parts = [bytes([b]) for b in piece]
        while len(parts) > 1:
            best, best_rank = -1, None
            for i in range(len(parts) - 1):
                r = self.rank.get(parts[i] + parts[i + 1])
                if r is not None and (best_rank is None or r < best_rank):
                    best, best_rank = i, r
            if best < 0:
                break
            parts[best:best + 2] = [parts[best] + parts[best + 1]]
        return [self.rank[p] for p in parts]

    def encode(self, text):
        ids = []
        for piece in PRETOKENIZE.findall(text):
            if piece not in self.cache:
                self.cache[piece] = self._encode_piece(piece.encode())
            ids += self.cache[piece]
        return ids

    def decode(self, ids):
        return b"".join(self.vocab[i] for i in ids).decode("utf-8", errors="replace")


def read_tiktoken(path):
    vocab = []
    for line in open(path, "rb"):
        token, rank = line.split()
        assert int(rank) == len(vocab)
        vocab.append(base64.b64decode(token))
    return vocab


def write_tokenizer_files(vocab, out_dir, template_config, model_max_length):
    """tiktoken.model, and tokenizer_config.json in the structure of K3's file (taken from the
    golden checkpoint's): the 256 special tokens re-based to start right after the ranks."""
    with open(os.path.join(out_dir, "tiktoken.model"), "w") as f:
        for rank, token in enumerate(vocab):
            f.write(f"{base64.b64encode(token).decode()} {rank}\n")
    template = json.load(open(template_config))
    old_first = min(int(k) for k in template["added_tokens_decoder"])
    first = len(vocab)
    decoder = {}
    for key, entry in template["added_tokens_decoder"].items():
        new_id = int(key) - old_first + first
        entry = dict(entry)
        if entry["content"] == f"<|reserved_token_{key}|>":
            entry["content"] = f"<|reserved_token_{new_id}|>"
        decoder[str(new_id)] = entry
    config = dict(template)
    config["added_tokens_decoder"] = decoder
    config["model_max_length"] = model_max_length
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
