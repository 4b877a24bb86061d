#!/usr/bin/env bash
# Bounded libFuzzer run of the pre-tokenizer + BPE (fuzz_tokenizer.cc) with ASan and UBSan.
#   tests/tokenizer/fuzz.sh OUT_DIR [SECONDS (default 45)]
# Built with Debian's clang directly (the project's build uses g++, which has no libFuzzer).
set -euo pipefail
out=$1
secs=${2:-45}
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out/corpus"
clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  -I"$root/src" -DDF_FUZZ_MODEL_DIR="\"$root/tests/data/golden/tiny-k3\"" \
  "$root/tests/tokenizer/fuzz_tokenizer.cc" "$root"/src/tokenizer/{utf8,vocab,pretokenizer,bpe,tokenizer}.cc \
  "$root/src/io/mapped_file.cc" "$root/src/base/log.cc" \
  $(pkg-config --cflags --libs libpcre2-8) -lpthread -o "$out/fuzz_tokenizer"
# Seeds: a few lines of every kind of text the oracle corpus has.
printf 'The capital of France is' >"$out/corpus/seed1"
printf 'a   b\r\n\t\xe3\x80\x80\xe4\xb8\xad\xe6\x96\x87abc 12345 <|open|> they'"'"'RE \xf0\x9f\x98\x80' >"$out/corpus/seed2"
"$out/fuzz_tokenizer" -max_total_time="$secs" -max_len=4096 -timeout=10 "$out/corpus" 2>&1 | tail -4
