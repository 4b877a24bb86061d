#!/usr/bin/env python3
"""Writes the tokenizer oracle corpus (deterministic, > 1 MB) so nothing large is committed.

usage: gen_corpus.py OUT_DIR  ->  OUT_DIR/corpus.txt (one text), OUT_DIR/corpus_typical.txt (the
same without the long runs, for the benchmark) and OUT_DIR/docs.jsonl (the same
material as ~3000 separate documents, one JSON string per line, many ending in whitespace so
"end of input" cases are exercised). Every section targets a pre-tokenizer or BPE edge: see the
comments. Code points are kept to Unicode 14 so PCRE2 10.42 and Rust's regex tables agree.
"""
import json
import random
import sys

R = random.Random(20240604)

WORDS = ("the of and to in is was that for on as with by at from his her they be this have "
         "not are but had one all were when we there can an your which their said if do will "
         "each about how up out them then she many some so these would other into has more two "
         "time could no way people my than first water been call who its now find long down day "
         "did get come made may part harbour bread morning mill teacher question tower storm "
         "lighthouse carpenter window evening market square winter summer").split()
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'LL",
                "'D", "'M", "'ſ", "'x", "’s"]
PUNCT = list(".,;:!?-—–…()[]{}\"'`~@#$%^&*_+=|\\/<>«»¿¡")
WS = [" ", "\t", "\n", "\r\n", "\r", "\x0b", "\x0c", "\u00a0", "\u1680", "\u2000", "\u2005",
      "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\u0085", "\x1c", "\x1d",
      "\x1e", "\x1f", "  ", "    ", "\n\n", " \n", "\t\t", "\r\n\r\n"]


def word():
    w = R.choice(WORDS)
    r = R.random()
    if r < 0.15:
        w = w.capitalize()
    elif r < 0.2:
        w = w.upper()
    elif r < 0.23:
        w = w.capitalize() + R.choice(WORDS).capitalize()  # CamelCase
    if R.random() < 0.05:
        w += R.choice(CONTRACTIONS)
    return w


def prose(n_chars):
    out = []
    size = 0
    while size < n_chars:
        s = " ".join(word() for _ in range(R.randint(3, 25)))
        s = s[0].upper() + s[1:] + R.choice([".", ".", ".", "!", "?", "...", ":", ";"])
        if R.random() < 0.2:
            s += R.choice(['"', ")", "'", "”"])
        s += R.choice([" ", " ", " ", "  ", "\n", "\n\n", " \n"])
        out.append(s)
        size += len(s)
    return "".join(out)


def code(n_chars):
    idents = ["x", "count", "buf", "self", "std", "vector", "i", "n_tokens", "kMaxLen", "HTTP_OK"]
    out = []
    size = 0
    while size < n_chars:
        ind = R.choice(["", "  ", "    ", "\t", "\t\t", "        "])
        a, b = R.choice(idents), R.choice(idents)
        line = R.choice([
            f"{ind}for (int {a} = 0; {a} < {b}.size(); ++{a}) {{",
            f"{ind}if {a} == {b}:  # {word()} {word()}",
            f"{ind}const auto& {a} = {b}->Get<{R.choice(['int', 'float', 'std::string'])}>();",
            f'{ind}print(f"{{{a}!r}} -> {{{b}:>10}}")',
            f"{ind}return {a} && !{b} || ({a} >> 3) != 0x{R.randint(0, 1 << 32):x};",
            f"{ind}}}",
            f'{ind}{{"{a}": [{R.randint(0, 999)}, {R.random():.6f}, null, true], "{b}": "{word()}"}}',
            f"{ind}// TODO({word()}): {prose(40).strip()}",
            f"{ind}$ {a} --{b}={R.randint(0, 99)} | grep -E '^[a-z]+$' > /dev/null 2>&1",
            f"{ind}<div class=\"{a}\">{word()}</div><!-- {b} -->",
        ])
        line += R.choice(["\n", "\n", "\r\n", "  \n", "\n\n"])
        out.append(line)
        size += len(line)
    return "".join(out)


def rand_cp(ranges):
    lo, hi = R.choice(ranges)
    return chr(R.randint(lo, hi))


HAN = [(0x4E00, 0x9FA5), (0x3400, 0x4DB5)]
KANA = [(0x3041, 0x3096), (0x30A1, 0x30FA)]
HANGUL = [(0xAC00, 0xD7A3)]
CJK_PUNCT = ["、", "。", "「", "」", "・", "ー", "々", "〇", "！", "？", "（", "）", "\u3000", "１２３", "ＡＢＣ"]


def cjk(n_chars):
    out = []
    size = 0
    while size < n_chars:
        kind = R.random()
        if kind < 0.3:
            s = "".join(rand_cp(HAN) for _ in range(R.randint(1, 12)))
        elif kind < 0.5:
            s = "".join(rand_cp(KANA) for _ in range(R.randint(1, 8)))
        elif kind < 0.65:
            s = "".join(rand_cp(HANGUL) for _ in range(R.randint(1, 6)))
        elif kind < 0.8:  # mixed within one run: Han/kana/Hangul/Latin back to back
            s = "".join(rand_cp(R.choice([HAN, KANA, HANGUL, [(0x61, 0x7A)]]))
                        for _ in range(R.randint(2, 10)))
        else:
            s = R.choice(CJK_PUNCT) + word()
        s += R.choice(["", "", " ", "。", "、", "\n", "\u3000"])
        out.append(s)
        size += len(s)
    return "".join(out)


EMOJI = ["😀", "👍", "👍🏽", "❤️", "🇯🇵", "🇺🇸", "1️⃣", "👨‍👩‍👧‍👦", "👩🏾‍💻", "🏳️‍🌈", "🧑‍🤝‍🧑",
         "✈️", "☕", "🙂", "🤖", "🦀", "#️⃣", "👁️‍🗨️", "🏴‍☠️", "👨🏻‍🦰"]


def emoji(n_chars):
    out = []
    size = 0
    while size < n_chars:
        s = "".join(R.choice(EMOJI) for _ in range(R.randint(1, 5)))
        s = R.choice(["", " ", word() + " ", word()]) + s + R.choice(["", " ", "!", "\n"])
        out.append(s)
        size += len(s)
    return "".join(out)


MARKED = ["e\u0301", "a\u0300\u0316", "o\u0308\u0304", "n\u0303", "Z\u0335\u0347\u0353\u0330",
          "क्षि", "हिन्दी", "مَرْحَبًا", "שָׁלוֹם", "ภาษาไทย", "각", "ǅemal", "ǈubljana", "ʰello",
          "Ⅻ", "½", "²³", "٣٤٥", "〡〢", "İstanbul", "ﬁne", "ß", "ΣΊΣΥΦΟΣ", "Ѐлка", "Kelvin"]


def marks(n_chars):
    out = []
    size = 0
    while size < n_chars:
        s = R.choice(MARKED)
        if R.random() < 0.3:
            s += "".join(chr(R.randint(0x300, 0x36F)) for _ in range(R.randint(1, 6)))
        s += R.choice(["", " ", "  ", ".", "\n", R.choice(PUNCT)])
        out.append(s)
        size += len(s)
    return "".join(out)


def digits():
    out = []
    for length in range(1, 80):
        for sep in [" ", "", ",", ".", "\n", "a", "-", "\u3000"]:
            out.append("".join(R.choice("0123456789") for _ in range(length)) + sep)
    out.append("".join(chr(0x660 + R.randint(0, 9)) for _ in range(50)) + " ")
    out.append("".join(chr(0xFF10 + R.randint(0, 9)) for _ in range(31)) + " ")
    return "".join(out)


def whitespace():
    out = []
    for a in WS:
        for b in WS:
            for follow in ["x", "X", "1", ".", "中", "", "é"]:
                out.append(a + b + follow)
    for n in range(1, 41):
        for w in WS:
            out.append("y" + w * n + R.choice(["z", ".", "", "\n"]))
    return "".join(out)


def specials():
    names = ["<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>", "[BOS]", "[EOS]",
             "<|endoftext|>", "<|fim_prefix|>", "<|reserved_token_700|>", "<osagent_mode>",
             "<|im_end|>", "[PAD]", "[UNK]", "<|media_pad|>"]
    out = []
    for _ in range(800):
        n = R.choice(names)
        out.append(R.choice(["", " ", word(), "<", "<|", "|"]) + n + R.choice(["", " ", ">", "\n", n]))
    out.append("<|open")
    out.append("|>")
    return "".join(out)


def unicode_mix(n_chars):
    ranges = [(0x20, 0x7E), (0xA1, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x5FF),
              (0x600, 0x6FF), (0x900, 0x97F), (0xE00, 0xE7F), (0x10A0, 0x10FF), (0x2000, 0x206F),
              (0x2100, 0x22FF), (0x2500, 0x257F), (0x3000, 0x303F), (0xE000, 0xE0FF),
              (0xFB00, 0xFDCF), (0xFE00, 0xFE0F), (0xFF00, 0xFFEF), (0x1D400, 0x1D4FF),
              (0x1F300, 0x1F5FF), (0x0378, 0x0379), (0x20000, 0x2A6DF)]
    s = []
    for _ in range(n_chars):
        c = rand_cp(ranges)
        s.append(c)
    return "".join(s)


def long_runs():
    letters = "".join(R.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(30000))
    return ("\n" + letters + " " + "x" * 25000 + " " + "y" * 25001 + " " + " " * 30000 + "z" +
            "\t" * 25002 + "\n" + "-" * 26000 + "\n" + "".join(rand_cp(HAN) for _ in range(27000)) +
            "\n" + "9" * 30000 + "\n" + " " * 24999 + "\n" + "Ab" * 13000 + "\n")


def main():
    out_dir = sys.argv[1]
    sections = [
        prose(330000), code(200000), cjk(120000), emoji(30000), marks(60000), digits(),
        whitespace(), specials(), unicode_mix(40000), long_runs(), prose(20000),
    ]
    text = "".join(sections) + "trailing spaces at end of input   "
    with open(out_dir + "/corpus.txt", "w", encoding="utf-8", newline="") as f:
        f.write(text)
    # For the benchmark: everything but the pathological long runs, whose quadratic BPE in
    # tiktoken would otherwise dominate its time.
    with open(out_dir + "/corpus_typical.txt", "w", encoding="utf-8", newline="") as f:
        f.write("".join(s for s in sections if len(s) < 200000 or not s.startswith("\n")))
    # Documents: cut the same text at random points (some inside whitespace runs).
    docs = []
    pos = 0
    while pos < len(text):
        n = R.randint(1, 900)
        docs.append(text[pos:pos + n])
        pos += n
    with open(out_dir + "/docs.jsonl", "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
    print(f"corpus: {len(text.encode())} bytes, {len(text)} chars, {len(docs)} documents")


if __name__ == "__main__":
    main()
