#!/usr/bin/env bash
# The tokenizer oracle test (ctest tokenizer_oracle, label e2e): deltafin's ids must equal npm
# tiktoken's, and decode must round-trip, for every vocabulary/pattern pair on the generated
# corpus, as one text and as ~2,500 separate documents.
#   run_oracle.sh DELTAFIN_BINARY WORK_DIR
# npm ci installs the locked tiktoken into WORK_DIR (never into the source tree, so parallel
# builds do not race); the corpus and the package's rank files are generated there too.
set -euo pipefail
bin=$1
work=$2
src=$(cd "$(dirname "$0")" && pwd)
model=$src/../../data/golden/tiny-k3
mkdir -p "$work"
cp "$src/package.json" "$src/package-lock.json" "$src/oracle.cjs" "$work/"
if ! cmp -s "$src/package-lock.json" "$work/node_modules/.deltafin-lock" 2>/dev/null; then
  (cd "$work" && npm ci --no-audit --no-fund --loglevel=error)
  cp "$src/package-lock.json" "$work/node_modules/.deltafin-lock"
fi
python3 "$src/gen_corpus.py" "$work"
node "$work/oracle.cjs" extract "$work"

check() {  # check NAME VOCAB_FOR_ORACLE PATTERN INPUT [oracle flags] -- deltafin flags...
  local name=$1 vocab=$2 pattern=$3 input=$4
  shift 4
  local oracle_flags=()
  while [[ $1 != -- ]]; do oracle_flags+=("$1"); shift; done
  shift
  "$bin" tokenize "$@" --input "$input" >"$work/$name.ids"
  node "$work/oracle.cjs" compare "$vocab" "$pattern" "$input" "$work/$name.ids" "${oracle_flags[@]}"
}

for input in corpus.txt docs.jsonl; do
  jl=()
  [[ $input == docs.jsonl ]] && jl=(--jsonl)
  for v in cl100k o200k; do
    for p in "$v" k3; do
      check "${v}_${p}_$input" "${v}_base" "$p" "$work/$input" "${jl[@]}" -- \
        --tiktoken "$work/${v}_base.tiktoken" --pattern "$p" "${jl[@]}"
    done
  done
  check "tiny_k3_$input" "$model/tiktoken.model" k3 "$work/$input" "${jl[@]}" --kimi-split -- \
    --model "$model" "${jl[@]}"
done
# Specials allowed (the trusted-structure path), and the parallel path.
check tiny_special "$model/tiktoken.model" k3 "$work/corpus.txt" --allow-special --kimi-split \
  --special-config "$model/tokenizer_config.json" -- --model "$model" --allow-special
check o200k_parallel o200k_base k3 "$work/corpus.txt" -- \
  --tiktoken "$work/o200k_base.tiktoken" --pattern k3 --threads 0
# Decode through deltafin's own CLI round-trips the corpus bytes.
"$bin" tokenize --model "$model" --decode <"$work/tiny_k3_corpus.txt.ids" | cmp - "$work/corpus.txt"
echo "ok: deltafin --decode round-trips the corpus"
