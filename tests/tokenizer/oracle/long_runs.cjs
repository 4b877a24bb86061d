// Writes the expected ids of tokenizer_test's LongRunOracleTest, computed by npm tiktoken (the
// oracle), into tests/data/tokenizer/long_runs/:
//   runs.tiktoken   a small rank file: the 256 single bytes, then space runs of 2..128, tab runs,
//                   " \t" runs, "\n\n" and " a" / "\ta" (long runs merge into a few long tokens,
//                   so where a run is cut, and where its last piece ends, changes the ids)
//   expected.json   for each case: the text as [string, repeat] parts, the pattern, whether the
//                   Kimi split applies (K3's tokenizer) and tiktoken's ids, run-length encoded as
//                   [id, count] pairs
// Run it next to the pinned tiktoken (node resolves `tiktoken` from the script's folder):
//   w=$(mktemp -d) && cp tests/tokenizer/oracle/{package.json,package-lock.json,oracle.cjs,long_runs.cjs} $w &&
//   (cd $w && npm ci) && node $w/long_runs.cjs tests/data/tokenizer/long_runs
"use strict";
const fs = require("fs");
const path = require("path");
const { makeEncoder, encode } = require("./oracle.cjs");

function rankFile() {
  const tokens = [];
  for (let b = 0; b < 256; ++b) tokens.push(Buffer.from([b]));
  for (let n = 2; n <= 128; n *= 2) tokens.push(Buffer.from(" ".repeat(n)));
  for (let n = 2; n <= 8; n *= 2) tokens.push(Buffer.from("\t".repeat(n)));
  for (let n = 1; n <= 8; n *= 2) tokens.push(Buffer.from(" \t".repeat(n)));
  for (const s of ["\n\n", " a", "\ta"]) tokens.push(Buffer.from(s));
  return tokens.map((t, i) => `${t.toString("base64")} ${i}`).join("\n") + "\n";
}

// The reported case (30,000 spaces, then a letter) and its tab/newline variants, under each
// pattern with tiktoken's rule, and K3's tokenizer (the Kimi split first). Kept near 30,000
// characters: tiktoken's merge loop is quadratic in a piece's merges (about 7 minutes for these on
// a loaded 2-core VM with a 100,001-space case; the fuzzer covers longer runs).
const TEXTS = {
  spaces_30000_a: [[" ", 30000], ["a", 1]],
  space_tab_15000_a: [[" \t", 15000], ["a", 1]],
  tabs_30000_a: [["\t", 30000], ["a", 1]],
  spaces_29000_newline_spaces_1000_tab_a: [[" ", 29000], ["\n", 1], [" ", 1000], ["\t", 1], ["a", 1]],
  newline_spaces_30000_end: [["x", 1], ["\n", 1], [" ", 30000]],
};

function main() {
  const out = process.argv[2];
  fs.mkdirSync(out, { recursive: true });
  const ranksPath = path.join(out, "runs.tiktoken");
  fs.writeFileSync(ranksPath, rankFile());
  const cases = [];
  for (const [name, parts] of Object.entries(TEXTS)) {
    const text = parts.map(([s, n]) => s.repeat(n)).join("");
    for (const [pattern, kimi] of [["k3", false], ["cl100k", false], ["o200k", false], ["k3", true]]) {
      const ids = encode(makeEncoder(ranksPath, pattern), text, false, kimi);
      const rle = [];
      for (const id of ids) {
        if (rle.length > 0 && rle[rle.length - 1][0] === id) rle[rle.length - 1][1]++;
        else rle.push([id, 1]);
      }
      cases.push({ name, parts, pattern, kimi_split: kimi, ids: rle });
    }
  }
  const meta = { produced_by: "tests/tokenizer/oracle/long_runs.cjs",
    oracle: `npm tiktoken ${JSON.parse(fs.readFileSync(path.join(__dirname, "node_modules/tiktoken/package.json"), "utf8")).version}`, cases };
  fs.writeFileSync(path.join(out, "expected.json"), JSON.stringify(meta) + "\n");
  console.log(`wrote ${cases.length} cases to ${out}`);
}

main();
