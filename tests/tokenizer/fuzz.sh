#!/usr/bin/env bash
# Bounded libFuzzer run of the pre-tokenizer + BPE (fuzz_tokenizer.cc) with ASan and UBSan.
#   tests/tokenizer/fuzz.sh OUT_DIR [SECONDS (default 45)]
# Built with Debian's clang directly (the project's build uses g++, which has no libFuzzer).
# Seeds: the committed corpus tests/tokenizer/fuzz_corpus/ (read only; new units go to
# OUT_DIR/corpus). To refresh it after a longer local run (keeps the inputs that add coverage):
#   OUT/fuzz_tokenizer -merge=1 -max_len=4096 NEW_DIR tests/tokenizer/fuzz_corpus OUT/corpus
# then replace tests/tokenizer/fuzz_corpus with NEW_DIR (keep it to a few hundred KB).
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
"$out/fuzz_tokenizer" -max_total_time="$secs" -max_len=4096 -timeout=10 \
  "$out/corpus" "$root/tests/tokenizer/fuzz_corpus" 2>&1 | tail -4
