// Differential tokenizer fuzzer: deltafin against npm tiktoken on generated adversarial inputs.
//
//   node difffuzz.cjs PEER RANKS_DIR MODEL_DIR [--seconds 60] [--first-seed 1] [--out DIR]
//   node difffuzz.cjs PEER RANKS_DIR MODEL_DIR --replay FILE CONFIG FLAGS
//
// PEER is tokenizer_difffuzz_peer (tests/tokenizer/difffuzz_peer.cc), started once and fed
// batches of raw inputs over a pipe while this process computes tiktoken's ids for the same batch.
// Configurations (difffuzz_peer.cc numbers them the same way):
//   0 cl100k_base, 1 o200k_base: the package's ranks, specials and patterns, whole text at once, as
//     tiktoken encodes;
//   2 k3: MODEL_DIR's vocabulary and specials, the Kimi splitting rule of tokenization_kimi.py,
//     then K3's pattern (K3's tokenizer);
//   3 o200k_base+k3: o200k_base's ranks with K3's pattern over the whole text (tiktoken with K3's
//     pattern; o200k_base merges long space runs, so a wrong cut shows);
//   4-6 tiny+cl100k, tiny+o200k, tiny+k3: MODEL_DIR's vocabulary with each pattern over the whole
//     text, for the huge whitespace runs (below).
// Ordinary inputs go through 0-3; the 25,000-36,000-character whitespace case through all seven;
// huge whitespace runs (25,000 characters up to 1 MB, mixed kinds with scattered line breaks, then
// a letter, digit, punctuation or the end) through 2 and 4-6: the tiny vocabulary merges no
// whitespace but "\n\n" and has " a"-style tokens, so where a run's pieces end shows in the ids
// while tiktoken's merge loop (quadratic in a piece's merges) stays fast on a million characters.
//
// The campaign is a fixed seed sequence: round r uses seed first_seed + r, so a run is repeatable
// and a longer run only adds rounds. Rounds continue until --seconds have passed. Every input goes
// through every configuration in one mode drawn from the seed: ordinary text, every special
// spelling allowed, or (inputs of 128 KiB and more) deltafin's 4-thread path. Invalid UTF-8 must
// be refused by deltafin naming the first bad byte; its lossy decoding (U+FFFD per maximal bad
// subpart, what a JS or Python caller would hand tiktoken) is then compared as text. On the first
// divergence the input is shrunk (chunk deletion, while it still diverges), the reproducer is
// printed and written to OUT_DIR, and the exit status is 1.
"use strict";
const { spawn } = require("child_process");
const fs = require("fs");
const path = require("path");
const { makeEncoder, encode } = require("./oracle.cjs");

const CONFIGS = ["cl100k_base", "o200k_base", "k3", "o200k_base+k3", "tiny+cl100k", "tiny+o200k",
  "tiny+k3"];
const ORDINARY_CONFIGS = [0, 1, 2, 3];
const HUGE_CONFIGS = [2, 4, 5, 6];
const KIMI_CONFIG = 2;  // the only one with the Kimi split
const FLAG_SPECIAL = 1, FLAG_THREADS = 2;
const PARALLEL_MIN_BYTES = 128 * 1024;  // below this deltafin's parallel path is not taken
const MAX_BYTES = 1000000;

// ---------------------------------------------------------------- deterministic generator

function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// Character sets. Code points are kept to Unicode 14 (PCRE2 10.42's tables; see docs/TOKENIZER.md).
// Unicode White_Space plus U+001C..U+001F (Python isspace but not \s) and two look-alikes that are
// neither (U+200B, U+180E).
const WHITESPACE = [" ", "\t", "\n", "\r", "\r\n", "\x0b", "\x0c", "\u0085", "\u00a0", "\u1680",
  "\u2000", "\u2003", "\u2007", "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000",
  "\x1c", "\x1d", "\x1e", "\x1f", "\u200b", "\u180e"];
const WHITESPACE_RUNS = [[" "], ["\t"], ["\n"], ["\r\n"], [" ", "\t"], [" ", "\n"], ["\n", "\r"],
  ["\u3000"], ["\u00a0", " "], WHITESPACE];
const HUGE_WHITESPACE_KINDS = [[" "], ["\t"], [" ", "\t"], ["\u3000"], ["\u00a0", " "], ["\u2003"],
  [" ", "\t", "\u00a0", "\u1680", "\u2000", "\u2007", "\u200a", "\u202f", "\u205f", "\u3000", "\x0b",
    "\x0c", "\u0085", "\u2028", "\u2029"], [" ", "\x1c", "\x1f"]];
const DIGITS = ["0123456789", "٠١٢٣٤٥٦٧٨٩", "０１２３４５６７８９", "²³¹¼½", "ⅠⅡⅢⅫ", "𝟎𝟏𝟐"];
const LETTERS = ["abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghij",
  "éèêëàâäôöûüçñÉÀÇßſ", "абвгдежзийклмнопрстАБВГД", "αβγδεζηθΑΒΓΔ", "中文字日本語漢", "ひらがなカタカナー",
  "한국어글자", "aeiou\u0301\u0308\u0327", "ǅǈǋᾈ", "ʰʲˠ", "ﬁﬂ", "𝐀𝐁𝐚𝐛"];
const PUNCT = ".,;:!?-—–…()[]{}\"'`~@#$%^&*_+=|\\/<>«»¿¡";
const WORDS = ("the of and to in is was that for on as with by at from they be this have not are " +
  "but had one all were when harbour bread morning mill tower storm Lighthouse WINTER").split(" ");
const CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'RE", "'LL", "'ſ", "’s"];
const EMOJI = ["😀", "👍🏽", "👨‍👩‍👧", "🇫🇷", "❤️", "🏳️‍🌈", "\ufe0f", "\u200d"];
const OTHER = ["\u0000", "\u0001", "\u007f", "\ufeff", "\ufffd", "\uffff", "\u{10ffff}", "\u{e0001}",
  "\u00ad", "\u2060", "\ud7ff", "\ue000"];
// Bytes that are never valid UTF-8 here: lone continuation, overlong, surrogate, > U+10FFFF,
// truncated sequences, bytes that never occur.
const INVALID = [[0x80], [0xbf], [0xc0, 0xaf], [0xc1, 0xbf], [0xe0, 0x80, 0xaf], [0xed, 0xa0, 0x80],
  [0xed, 0xbf, 0xbf], [0xf4, 0x90, 0x80, 0x80], [0xf8, 0x88, 0x80, 0x80, 0x80], [0xff], [0xfe],
  [0xe2, 0x82], [0xf0, 0x9f, 0x98], [0xc3]];

class Generator {
  constructor(seed, specials) {
    this.rand = mulberry32(seed);
    this.specials = specials;
  }
  int(lo, hi) { return lo + Math.floor(this.rand() * (hi - lo + 1)); }
  pick(a) { return a[Math.floor(this.rand() * a.length)]; }
  chance(p) { return this.rand() < p; }
  // Log-uniform length in [1, max]: short runs are common, every scale up to max occurs.
  len(max) { return Math.max(1, Math.floor(Math.exp(this.rand() * Math.log(max)))); }
  chars(set) { return Array.from(set); }
  run(set, n) {
    const cs = this.chars(set);
    let s = "";
    for (let i = 0; i < n; ++i) s += this.pick(cs);
    return s;
  }
  whitespace(n) {
    const kinds = this.pick(WHITESPACE_RUNS);
    let s = "";
    for (let i = 0; i < n; ++i) s += this.pick(kinds);
    return s;
  }
  // `cap` bounds runs that form one pre-tokenizer piece: tiktoken's merge loop is quadratic in a
  // piece's length, and the campaign is time-bounded. Digit runs are cut into 3-digit pieces by
  // every pattern, so they may be long at any size.
  segment(cap) {
    const k = this.rand();
    if (k < 0.16) return this.pick(WORDS) + (this.chance(0.1) ? this.pick(CONTRACTIONS) : "") + " ";
    if (k < 0.32) return this.whitespace(this.len(cap));
    if (k < 0.42) return this.run(this.pick(DIGITS), this.len(this.chance(0.2) ? 60000 : 400));
    if (k < 0.54) return this.run(this.pick(LETTERS), this.len(cap));
    if (k < 0.62) return this.run(PUNCT, this.len(Math.min(cap, 3000)));
    if (k < 0.68) return this.pick(EMOJI);
    if (k < 0.72) return this.pick(OTHER);
    if (k < 0.84) {  // special spellings, whole or broken
      const s = this.pick(this.specials);
      const r = this.rand();
      if (r < 0.7) return s;
      if (r < 0.8) return s.slice(0, this.int(1, s.length - 1));
      if (r < 0.9) return "<" + s + ">";
      return s + s;
    }
    return this.pick(WORDS) + this.pick(["\n", ". ", ", ", "\r\n", "'", "/"]);
  }
  // One input as bytes. Most are short; some are long; a few approach 1 MB (MAX_BYTES).
  input() {
    const r = this.rand();
    const target = r < 0.7 ? this.len(2000) : r < 0.95 ? this.len(64 * 1024) : this.int(256 * 1024, MAX_BYTES);
    const cap = target > 64 * 1024 ? 1000 : 4000;
    const parts = [];
    let size = 0;
    while (size < target) {
      const s = Buffer.from(this.segment(cap), "utf8");
      parts.push(s);
      size += s.length;
    }
    if (this.chance(0.08)) {
      for (let i = this.int(1, 3); i > 0; --i)
        parts.splice(this.int(0, parts.length), 0, Buffer.from(this.pick(INVALID)));
    }
    let b = Buffer.concat(parts);
    if (b.length > MAX_BYTES) {  // cut at a character boundary
      let end = MAX_BYTES;
      while (end > 0 && (b[end] & 0xc0) === 0x80) --end;
      b = b.subarray(0, end);
    }
    return b;
  }
  // The reported case and its neighbours: a run of 24,990-36,000 whitespace characters, then a
  // letter, digit, punctuation, special spelling or the end, possibly after some text.
  longWhitespace() {
    const head = this.chance(0.5) ? "" : this.pick(WORDS) + this.pick(["", " ", "\n"]);
    const n = this.chance(0.5) ? this.int(24990, 25010) : this.int(25011, 36000);
    const ws = this.chance(0.6) ? " ".repeat(n) : this.whitespace(n);
    const tail = this.pick(["a", "Z", "中", "7", ".", "", "<|endoftext|>", " word", "\n"]);
    return Buffer.from(head + ws + tail, "utf8");
  }
  // A huge whitespace run: 25,000 characters up to MAX_BYTES in all, of one kind or mixed
  // (spaces, tabs, Unicode spaces, U+0085, U+001C..U+001F which Python counts as space and \s
  // does not), with line breaks scattered at a rate of 0, 1e-5 or 1e-3 per character (so the
  // `\s*[\r\n]+` alternative backtracks over the run to its last break), after an optional word,
  // then a letter, digit, punctuation, special spelling or the end.
  hugeWhitespace() {
    const head = this.chance(0.5) ? "" : this.pick(WORDS) + this.pick(["", " ", "\n", ". "]);
    const tail = this.pick(["a", "Z", "é", "中", "7", "42", ".", "!?", "<|endoftext|>", " word", "'s",
      "\n", ""]);
    const kinds = this.pick(HUGE_WHITESPACE_KINDS);
    const breaks = this.pick([0, 1e-5, 1e-3]);
    const budget = MAX_BYTES - Buffer.byteLength(head + tail, "utf8");
    const target = Math.min(budget, Math.floor(Math.exp(Math.log(25000) +
      this.rand() * (Math.log(budget) - Math.log(25000)))));
    const parts = [];
    let bytes = 0;
    while (true) {
      const c = this.chance(breaks) ? this.pick(["\n", "\r", "\r\n"]) : this.pick(kinds);
      const b = Buffer.byteLength(c, "utf8");
      if (bytes + b > target) break;
      parts.push(c);
      bytes += b;
    }
    return Buffer.from(head + parts.join("") + tail, "utf8");
  }
  // A single long letter or whitespace run: the long-piece BPE path (one piece of 8,000-20,000).
  longPiece() {
    const n = this.int(8000, 20000);
    const body = this.chance(0.5) ? this.run(this.pick(LETTERS.slice(0, 5)), n) : this.whitespace(n);
    return Buffer.from(body, "utf8");
  }
}

// Mode for one (input, config): ordinary, specials allowed, or the parallel path.
function drawFlags(gen, size) {
  const r = gen.rand();
  if (r < 0.25) return FLAG_SPECIAL;
  if (r < 0.75 && size >= PARALLEL_MIN_BYTES) return FLAG_THREADS;
  return 0;
}

// Byte offset of the first ill-formed UTF-8 sequence, or -1.
function firstInvalidUtf8(b) {
  for (let i = 0; i < b.length;) {
    const c = b[i];
    let n = 0, min = 0;
    if (c < 0x80) { ++i; continue; }
    if (c >= 0xc2 && c <= 0xdf) { n = 1; min = 0x80; }
    else if (c >= 0xe0 && c <= 0xef) { n = 2; min = 0x800; }
    else if (c >= 0xf0 && c <= 0xf4) { n = 3; min = 0x10000; }
    else return i;
    if (i + n >= b.length) return i;  // truncated at the end
    let cp = c & (0x3f >> n);
    for (let k = 1; k <= n; ++k) {
      if ((b[i + k] & 0xc0) !== 0x80) return i;
      cp = (cp << 6) | (b[i + k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
    i += n + 1;
  }
  return -1;
}

// ---------------------------------------------------------------- the deltafin peer

class Peer {
  constructor(bin, ranksDir, modelDir) {
    this.proc = spawn(bin, [ranksDir, modelDir], { stdio: ["pipe", "pipe", "inherit"] });
    this.buf = Buffer.alloc(0);
    this.waiting = [];  // resolvers, in request order
    this.proc.stdout.on("data", (d) => { this.buf = Buffer.concat([this.buf, d]); this.drain(); });
    this.exited = new Promise((res) => this.proc.on("exit", (code) => res(code)));
    this.exited.then((code) => {
      for (const w of this.waiting) w.reject(new Error(`peer exited (status ${code})`));
      this.waiting = [];
    });
  }
  // Parses every complete reply in the buffer.
  drain() {
    while (this.waiting.length > 0 && this.buf.length >= 8) {
      const status = this.buf.readUInt32LE(0), n = this.buf.readUInt32LE(4);
      const bytes = status === 0 ? 4 * n : n;
      if (this.buf.length < 8 + bytes) return;
      const body = this.buf.subarray(8, 8 + bytes);
      const reply = status === 0
        ? { ok: true, ids: Array.from(new Uint32Array(body.buffer.slice(body.byteOffset, body.byteOffset + bytes))) }
        : { ok: false, message: body.toString("utf8") };
      this.buf = this.buf.subarray(8 + bytes);
      this.waiting.shift().resolve(reply);
    }
  }
  // Queues one request; the reply promise resolves in order. Many may be in flight.
  encode(config, flags, bytes) {
    const head = Buffer.alloc(12);
    head.writeUInt32LE(config, 0);
    head.writeUInt32LE(flags, 4);
    head.writeUInt32LE(bytes.length, 8);
    this.proc.stdin.write(Buffer.concat([head, bytes]));
    return new Promise((resolve, reject) => this.waiting.push({ resolve, reject }));
  }
  close() { this.proc.stdin.end(); return this.exited; }
}

// ---------------------------------------------------------------- comparison

function oracleIds(encoders, config, flags, text) {
  return Array.from(encode(encoders[config], text, (flags & FLAG_SPECIAL) !== 0, config === KIMI_CONFIG));
}

// Inputs tiktoken itself cannot encode (it throws: fancy-regex's backtracking stack holds
// 1,000,000 entries, so one pre-tokenizer piece of about a million characters or more panics the
// WASM module). There deltafin's ids must still decode to the input; the campaign counts them.
let oracleRefused = 0;

// Checks one case. Returns null when deltafin agrees, else a one-line description.
function judge(encoders, config, flags, bytes, reply) {
  const bad = firstInvalidUtf8(bytes);
  if (bad >= 0) {
    if (reply.ok) return `accepted invalid UTF-8 (first bad byte at offset ${bad})`;
    if (!reply.message.includes(`byte offset ${bad}`))
      return `refused invalid UTF-8 without naming byte offset ${bad}: ${reply.message}`;
    return null;
  }
  if (!reply.ok) return `refused valid text: ${reply.message}`;
  let want;
  try {
    want = oracleIds(encoders, config, flags, bytes.toString("utf8"));
  } catch (e) {
    ++oracleRefused;
    const back = Buffer.from(encoders[config].decode(Uint32Array.from(reply.ids)));
    return back.equals(bytes) ? null : `tiktoken threw (${e}) and deltafin's ids do not decode to the input`;
  }
  const got = reply.ids;
  let i = 0;
  while (i < want.length && i < got.length && want[i] === got[i]) ++i;
  if (i === want.length && i === got.length) return null;
  return `first difference at token ${i} of ${want.length} (tiktoken ${want[i]}, deltafin ${got[i]}); ` +
    `deltafin gave ${got.length} ids`;
}

async function diverges(peer, encoders, config, flags, bytes) {
  return judge(encoders, config, flags, bytes, await peer.encode(config, flags, bytes));
}

// Deletes chunks (halving the chunk size when nothing more can go) while the input still diverges;
// valid text is cut in characters, so it stays valid, invalid input in bytes. Bounded in time so a
// huge input cannot stall the report.
async function shrink(peer, encoders, config, flags, bytes, seconds) {
  const valid = firstInvalidUtf8(bytes) < 0;
  const toBytes = (units) => (valid ? Buffer.from(units.join(""), "utf8") : Buffer.from(units));
  const deadline = Date.now() + seconds * 1000;
  let cur = valid ? Array.from(bytes.toString("utf8")) : Array.from(bytes);
  for (let chunk = 2 ** Math.floor(Math.log2(Math.max(1, cur.length / 2))); chunk >= 1 && Date.now() < deadline;) {
    let progressed = false;
    for (let i = 0; i < cur.length && Date.now() < deadline;) {
      const cand = cur.slice(0, i).concat(cur.slice(i + chunk));
      if (cand.length > 0 && await diverges(peer, encoders, config, flags, toBytes(cand))) {
        cur = cand;
        progressed = true;
      } else {
        i += chunk;
      }
    }
    if (!progressed) chunk = Math.floor(chunk / 2);
  }
  return toBytes(cur);
}

// A short JS expression for an input: runs of 8+ equal characters as "c".repeat(n).
function render(bytes) {
  if (firstInvalidUtf8(bytes) >= 0) return `Buffer.from("${bytes.toString("hex")}", "hex")`;
  const cps = Array.from(bytes.toString("utf8"));
  const parts = [];
  let lit = "";
  for (let i = 0; i < cps.length;) {
    let j = i;
    while (j < cps.length && cps[j] === cps[i]) ++j;
    if (j - i >= 8) {
      if (lit) parts.push(JSON.stringify(lit));
      lit = "";
      parts.push(`${JSON.stringify(cps[i])}.repeat(${j - i})`);
    } else {
      lit += cps.slice(i, j).join("");
    }
    i = j;
  }
  if (lit || parts.length === 0) parts.push(JSON.stringify(lit));
  const s = parts.join(" + ");
  return s.length > 600 ? s.slice(0, 600) + ` ... (${s.length} characters in all; see the .bin file)` : s;
}

// ---------------------------------------------------------------- main

function loadEncoders(ranksDir, modelDir) {
  return [
    makeEncoder("cl100k_base", "cl100k"),
    makeEncoder("o200k_base", "o200k"),
    makeEncoder(path.join(modelDir, "tiktoken.model"), "k3", path.join(modelDir, "tokenizer_config.json")),
    makeEncoder("o200k_base", "k3"),
    ...["cl100k", "o200k", "k3"].map((p) =>
      makeEncoder(path.join(modelDir, "tiktoken.model"), p, path.join(modelDir, "tokenizer_config.json"))),
  ];
}

function allSpecials(ranksDir, modelDir) {
  const out = [];
  for (const name of ["cl100k_base", "o200k_base"])
    out.push(...Object.keys(JSON.parse(fs.readFileSync(path.join(ranksDir, `${name}.specials.json`), "utf8"))));
  const cfg = JSON.parse(fs.readFileSync(path.join(modelDir, "tokenizer_config.json"), "utf8"));
  for (const e of Object.values(cfg.added_tokens_decoder)) out.push(e.content);
  out.push("<|reserved_token_700|>", "<|reserved_token_0|>");  // a K3 default and a non-token
  return [...new Set(out)];
}

async function report(peer, encoders, outDir, seed, config, flags, bytes, why) {
  console.error(`DIVERGENCE seed ${seed}, ${CONFIGS[config]}, flags ${flags}, ${bytes.length} bytes: ${why}`);
  fs.mkdirSync(outDir, { recursive: true });
  fs.writeFileSync(path.join(outDir, "divergence-original.bin"), bytes);
  console.error("shrinking (at most 120 s) ...");
  const small = await shrink(peer, encoders, config, flags, bytes, 120);
  const file = path.join(outDir, "divergence.bin");
  fs.writeFileSync(file, small);
  console.error(`minimal reproducer (${small.length} bytes, written to ${file}):\n  ${render(small)}`);
  console.error(`  ${await diverges(peer, encoders, config, flags, small)}`);
  console.error(`replay: node difffuzz.cjs PEER RANKS_DIR MODEL_DIR --replay ${file} ${config} ${flags}`);
}

async function main() {
  const args = process.argv.slice(2);
  const [bin, ranksDir, modelDir] = args;
  const opt = (f, d) => (args.indexOf(f) >= 0 ? args[args.indexOf(f) + 1] : d);
  const encoders = loadEncoders(ranksDir, modelDir);
  const peer = new Peer(bin, ranksDir, modelDir);
  if (args.includes("--replay")) {
    const i = args.indexOf("--replay");
    const why = await diverges(peer, encoders, Number(args[i + 2]), Number(args[i + 3]), fs.readFileSync(args[i + 1]));
    console.log(why === null ? "identical" : why);
    await peer.close();
    return why === null ? 0 : 1;
  }
  const seconds = Number(opt("--seconds", 60));
  const firstSeed = Number(opt("--first-seed", 1));
  const outDir = opt("--out", ".");
  const specials = allSpecials(ranksDir, modelDir);
  const t0 = Date.now();
  const stats = { rounds: 0, inputs: 0, cases: 0, bytes: 0, max_bytes: 0, invalid_refused: 0,
    special_cases: 0, parallel_cases: 0, long_whitespace_inputs: 0, huge_whitespace_inputs: 0,
    huge_whitespace_cases: 0, longest_whitespace_run: 0 };
  // Longest run of \s characters (Unicode White_Space, what the patterns' \s means), in characters.
  const WS_RUN = /[\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+/gu;
  const noteRuns = (b) => {
    for (const m of b.toString("utf8").matchAll(WS_RUN)) {
      const n = m[0].length;  // UTF-16 units = characters: every White_Space code point is in the BMP
      if (n > stats.longest_whitespace_run) stats.longest_whitespace_run = n;
    }
  };
  for (let seed = firstSeed; (Date.now() - t0) / 1000 < seconds; ++seed) {
    // Ten random inputs; every other round the long-whitespace case, every fourth a long piece
    // (tiktoken's merge loop is quadratic in a piece's length: these dominate a round's time);
    // every round a huge whitespace run.
    const gen = new Generator(seed, specials);
    const inputs = [];  // {bytes, configs}
    for (let i = 0; i < 10; ++i) inputs.push({ bytes: gen.input(), configs: ORDINARY_CONFIGS });
    if (seed % 2 === 1) {
      inputs.push({ bytes: gen.longWhitespace(), configs: CONFIGS.map((_, i) => i) });
      stats.long_whitespace_inputs++;
    }
    if (seed % 4 === 2) inputs.push({ bytes: gen.longPiece(), configs: ORDINARY_CONFIGS });
    const huge = gen.hugeWhitespace();
    inputs.push({ bytes: huge, configs: HUGE_CONFIGS });
    stats.huge_whitespace_inputs++;
    stats.huge_whitespace_cases += HUGE_CONFIGS.length;
    // Invalid inputs are also compared as their lossy decoding.
    for (const input of inputs.slice()) {
      if (firstInvalidUtf8(input.bytes) >= 0)
        inputs.push({ bytes: Buffer.from(input.bytes.toString("utf8"), "utf8"), configs: input.configs });
    }
    const cases = [];
    for (const { bytes, configs } of inputs) {
      for (const config of configs) {
        const flags = drawFlags(gen, bytes.length);
        cases.push({ config, flags, bytes, reply: peer.encode(config, flags, bytes) });
      }
    }
    for (const c of cases) {  // tiktoken runs here while the peer works through the batch
      const why = judge(encoders, c.config, c.flags, c.bytes, await c.reply);
      if (why !== null) {
        await report(peer, encoders, outDir, seed, c.config, c.flags, c.bytes, why);
        await peer.close();
        return 1;
      }
      stats.cases++;
      if (firstInvalidUtf8(c.bytes) >= 0) stats.invalid_refused++;
      if (c.flags & FLAG_SPECIAL) stats.special_cases++;
      if (c.flags & FLAG_THREADS) stats.parallel_cases++;
    }
    for (const { bytes: b } of inputs) {
      noteRuns(b);
      stats.inputs++;
      stats.bytes += b.length;
      stats.max_bytes = Math.max(stats.max_bytes, b.length);
    }
    stats.rounds++;
  }
  stats.tiktoken_refused = oracleRefused;
  await peer.close();
  stats.seeds = `${firstSeed}..${firstSeed + stats.rounds - 1}`;
  stats.seconds = Math.round((Date.now() - t0) / 100) / 10;
  console.log(`difffuzz: ${stats.cases} cases (${stats.inputs} inputs through ${CONFIGS.join(", ")}), ` +
    `${(stats.bytes / 1e6).toFixed(1)} MB, 0 divergences in ${stats.seconds} s`);
  console.log(JSON.stringify(stats));
  return 0;
}

main().then((code) => { process.exitCode = code; }, (e) => { console.error(e); process.exitCode = 2; });
