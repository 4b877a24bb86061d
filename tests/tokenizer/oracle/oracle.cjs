// Oracle side of the tokenizer tests: OpenAI's tiktoken (npm `tiktoken`, the Rust library built
// to WASM) with the same vocabulary, pattern and (for a K3 model folder) Kimi splitting rule as
// deltafin.
//
//   node oracle.cjs extract OUT_DIR
//       writes cl100k_base.tiktoken and o200k_base.tiktoken from the ranks the package ships, and
//       their special tokens as {"spelling": id} (cl100k_base.specials.json, o200k_base...)
//   node oracle.cjs compare VOCAB PATTERN CORPUS OURS [--jsonl] [--special-config FILE] [--allow-special] [--kimi-split]
//       VOCAB: cl100k_base | o200k_base (package ranks) or a tiktoken.model path;
//       PATTERN: k3 | cl100k | o200k; OURS: deltafin's output for CORPUS. Exit 1 on any mismatch.
//   node oracle.cjs bench VOCAB PATTERN CORPUS [REPEAT] [--kimi-split]
//       single-threaded encode throughput in MB/s (printed as JSON)
// --kimi-split: K3's tokenizer, tokenization_kimi.py's cut first (what deltafin does for
// `--model DIR`); without it tiktoken's own rule, the whole text at once whatever the pattern
// (deltafin's `--tiktoken FILE --pattern P`). difffuzz.cjs requires this file for makeEncoder,
// encode and the rank extraction.
"use strict";
const fs = require("fs");
const path = require("path");
const { Tiktoken } = require("tiktoken/lite");

// The published patterns. K3's is docs/MODEL.md §5.3 verbatim: Rust's regex (inside fancy-regex) accepts
// `&&` class intersection, so no rewrite is needed on this side.
const PATTERNS = {
  k3: String.raw`[\p{Han}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
  cl100k: require("tiktoken/encoders/cl100k_base.json").pat_str,
  o200k: require("tiktoken/encoders/o200k_base.json").pat_str,
};

// The package stores ranks as "! <first rank> <base64> <base64> ..." (consecutive ranks).
function packageRanksToTiktoken(name) {
  const parts = require(`tiktoken/encoders/${name}.json`).bpe_ranks.split(" ");
  const lines = [];
  let rank = 0;
  for (let i = 0; i < parts.length; ++i) {
    if (parts[i] === "!") {
      rank = Number(parts[++i]);
      continue;
    }
    lines.push(`${parts[i]} ${rank++}`);
  }
  return lines.join("\n") + "\n";
}

function makeEncoder(vocab, pattern, specialConfig) {
  const ranks = vocab.endsWith("_base") ? packageRanksToTiktoken(vocab) : fs.readFileSync(vocab, "utf8");
  // The package's encodings come with their special tokens (cl100k_base: <|endoftext|>, the FIM
  // tokens, <|endofprompt|>); a rank file gets only what a K3 config gives it.
  const specials = vocab.endsWith("_base") ? { ...require(`tiktoken/encoders/${vocab}.json`).special_tokens } : {};
  if (specialConfig) {  // K3 layout: 256 reserved ids after the ranks, config overrides
    const n = ranks.split("\n").filter((l) => l.length > 0).length;
    for (let id = n; id < n + 256; ++id) specials[`<|reserved_token_${id}|>`] = id;
    const cfg = JSON.parse(fs.readFileSync(specialConfig, "utf8")).added_tokens_decoder;
    for (const [id, entry] of Object.entries(cfg)) {
      delete specials[`<|reserved_token_${id}|>`];
      specials[entry.content] = Number(id);
    }
  }
  return new Tiktoken(ranks, specials, PATTERNS[pattern]);
}

// tokenization_kimi.py: 400,000-character slices, then runs of <= 25,000 (non-)space characters
// (Python str.isspace), each encoded separately.
const PY_SPACE = new Set([0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x85, 0xa0, 0x1680, 0x2028, 0x2029, 0x202f,
  0x205f, 0x3000]);
function isSpace(cp) {
  return (cp >= 9 && cp <= 13) || PY_SPACE.has(cp) || (cp >= 0x2000 && cp <= 0x200a);
}
function kimiSplit(text) {
  const cps = Array.from(text);
  const out = [];
  for (let i = 0; i < cps.length; i += 400000) {
    const s = cps.slice(i, i + 400000);
    let len = 0, start = 0;
    let isSp = s.length > 0 ? isSpace(s[0].codePointAt(0)) : false;
    for (let j = 0; j < s.length; ++j) {
      const now = isSpace(s[j].codePointAt(0));
      if (isSp !== now) {
        len = 1;
        isSp = now;
      } else if (++len > 25000) {
        out.push(s.slice(start, j).join(""));
        start = j;
        len = 1;
      }
    }
    out.push(s.slice(start).join(""));
  }
  return out;
}

// kimi: K3's tokenizer (tokenization_kimi.py cuts first); otherwise tiktoken's own rule, the whole
// text at once, whatever the pattern.
function encode(enc, text, allowSpecial, kimi) {
  const ids = [];
  for (const part of kimi ? kimiSplit(text) : [text]) {
    const r = allowSpecial ? enc.encode(part, "all") : enc.encode_ordinary(part);
    for (const id of r) ids.push(id);
  }
  return ids;
}

function main() {
  const [cmd, ...args] = process.argv.slice(2);
  if (cmd === "extract") {
    for (const name of ["cl100k_base", "o200k_base"]) {
      fs.writeFileSync(path.join(args[0], `${name}.tiktoken`), packageRanksToTiktoken(name));
      fs.writeFileSync(path.join(args[0], `${name}.specials.json`),
        JSON.stringify(require(`tiktoken/encoders/${name}.json`).special_tokens));
    }
    return 0;
  }
  const flag = (f) => args.includes(f);
  const opt = (f) => (args.indexOf(f) >= 0 ? args[args.indexOf(f) + 1] : undefined);
  const [vocab, pattern, corpusPath] = args;
  const enc = makeEncoder(vocab, pattern, opt("--special-config"));
  const corpus = fs.readFileSync(corpusPath, "utf8");
  if (cmd === "bench") {
    const repeat = Number(args[3] || 3);
    encode(enc, corpus, false, flag("--kimi-split"));  // warm-up
    const t0 = process.hrtime.bigint();
    let n = 0;
    for (let r = 0; r < repeat; ++r) n += encode(enc, corpus, false, flag("--kimi-split")).length;
    const s = Number(process.hrtime.bigint() - t0) / 1e9;
    const mb = Buffer.byteLength(corpus) * repeat / 1e6;
    console.log(JSON.stringify({ engine: "npm tiktoken", vocab: path.basename(vocab), pattern,
      mb_per_s: mb / s, tokens: n / repeat }));
    return 0;
  }
  if (cmd !== "compare") throw new Error("usage: see the header of oracle.cjs");
  const jsonl = flag("--jsonl");
  const docs = jsonl ? corpus.split("\n").filter((l) => l.length).map((l) => JSON.parse(l)) : [corpus];
  const ours = fs.readFileSync(args[3], "utf8").split("\n").filter((l) => l.length).map((l) => JSON.parse(l));
  if (ours.length !== docs.length) {
    console.error(`FAIL: ${docs.length} documents but ${ours.length} outputs`);
    return 1;
  }
  let total = 0;
  for (let d = 0; d < docs.length; ++d) {
    const want = encode(enc, docs[d], flag("--allow-special"), flag("--kimi-split"));
    const got = ours[d];
    total += want.length;
    const n = Math.min(want.length, got.length);
    let i = 0;
    while (i < n && want[i] === got[i]) ++i;
    if (i < n || want.length !== got.length) {
      const ctx = (ids) => JSON.stringify(Buffer.from(enc.decode(Uint32Array.from(ids.slice(Math.max(0, i - 5), i + 5)))).toString());
      console.error(`FAIL ${vocab}/${pattern} doc ${d}: first difference at token ${i} ` +
        `(tiktoken ${want[i]} ${ctx(want)} vs deltafin ${got[i]} ${ctx(got)}); lengths ${want.length} vs ${got.length}`);
      return 1;
    }
    // Round trip: tiktoken's decode of our ids must give back the document's bytes.
    const back = Buffer.from(enc.decode(Uint32Array.from(got)));
    if (!back.equals(Buffer.from(docs[d], "utf8"))) {
      console.error(`FAIL ${vocab}/${pattern} doc ${d}: decode does not round-trip`);
      return 1;
    }
  }
  console.log(`ok ${vocab}/${pattern}${flag("--allow-special") ? " (specials allowed)" : ""}: ` +
    `${docs.length} document(s), ${Buffer.byteLength(corpus)} bytes, ${total} tokens identical`);
  return 0;
}

module.exports = { PATTERNS, makeEncoder, kimiSplit, encode, packageRanksToTiktoken };
if (require.main === module) process.exitCode = main();
