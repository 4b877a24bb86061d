#!/usr/bin/env bash
# Tokenizer encode benchmark (not a test): deltafin vs npm tiktoken on the same corpus, vocabulary
# and pattern, in the same run; deltafin single-threaded and on all cores. Prints a Markdown table
# for docs/PERFORMANCE.md.
#   tests/tokenizer/bench.sh BUILD_DIR
# Needs the oracle test's work folder (ctest -R tokenizer_oracle creates it: corpus, rank files,
# node_modules).
set -euo pipefail
build=$1
work=$build/tests/tokenizer-oracle
bench=$build/tests/tokenizer_bench
model=$(cd "$(dirname "$0")/../data/golden/tiny-k3" && pwd)
cores=$(nproc)
for corpus in corpus_typical.txt corpus.txt; do
echo
echo "$corpus ($(stat -c %s "$work/$corpus") bytes):"
echo
echo "| vocabulary | pattern | npm tiktoken MB/s | deltafin 1 thread MB/s | ratio | deltafin $cores threads MB/s |"
echo "|---|---|---|---|---|---|"
for pair in "cl100k_base cl100k" "cl100k_base k3" "o200k_base o200k" "o200k_base k3" "tiny-k3 k3"; do
  set -- $pair
  if [[ $1 == tiny-k3 ]]; then
    ours=(--model "$model"); theirs=$model/tiktoken.model; split=--kimi-split
  else
    ours=(--tiktoken "$work/$1.tiktoken" --pattern "$2"); theirs=$1; split=
  fi
  js=$(node "$work/oracle.cjs" bench "$theirs" "$2" "$work/$corpus" 3 $split | sed 's/.*"mb_per_s":\([0-9.]*\).*/\1/')
  mapfile -t df < <("$bench" "${ours[@]}" --input "$work/$corpus" --threads "1,$cores" --repeat 5 |
                    sed 's/.*"mb_per_s": \([0-9.]*\).*/\1/')
  printf '| %s | %s | %.2f | %.2f | %.2fx | %.2f |\n' "$1" "$2" "$js" "${df[0]}" \
    "$(awk "BEGIN{print ${df[0]} / $js}")" "${df[1]}"
done
done
