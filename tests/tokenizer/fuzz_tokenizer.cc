// libFuzzer target for the pre-tokenizer and BPE (run by tests/tokenizer/fuzz.sh, bounded time).
// For any input: invalid UTF-8 must be refused with a Status (never a crash); valid UTF-8 must
// encode under every pattern, decode back to the same bytes, equal the pieces of one
// pre-tokenizer scan over each input span (the whole text with tiktoken's rule, each Kimi span for
// the model folder's K3 tokenizer: no other cutting), give spans that tile the input with the run
// limits shrunk (so the split code paths run), and the two BPE strategies must agree. The seed
// corpus is committed in tests/tokenizer/fuzz_corpus/ (fuzz.sh).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

using namespace deltafin::tokenizer;

namespace {

std::vector<std::unique_ptr<Tokenizer>>* Tokenizers() {
  static auto* toks = [] {
    auto* v = new std::vector<std::unique_ptr<Tokenizer>>();
    // The model folder's own tokenizer (the Kimi split, K3's pattern), then its vocabulary with
    // each pattern over the whole text (tiktoken's rule).
    auto model = Tokenizer::LoadModelDir(DF_FUZZ_MODEL_DIR);
    if (!model.ok()) std::abort();
    const Vocab base = (*model)->vocab();
    v->push_back(std::move(*model));
    for (PatternKind k : {PatternKind::kK3, PatternKind::kCl100k, PatternKind::kO200k}) {
      auto vocab = base;
      auto made = Tokenizer::Create(std::move(vocab), k);
      if (!made.ok()) std::abort();
      v->push_back(std::move(*made));
    }
    return v;
  }();
  return toks;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (!ValidateUtf8(text).ok()) {
    if ((*Tokenizers())[0]->Encode(text).ok()) std::abort();
    return 0;
  }
  for (const auto& tok : *Tokenizers()) {
    auto ids = tok->Encode(text);
    if (!ids.ok()) std::abort();
    auto back = tok->Decode(*ids);
    if (!back.ok() || *back != text) std::abort();
    std::vector<Span> spans{{0, text.size()}};
    if (tok->input_split() == InputSplit::kKimi) spans = KimiSplit(text);
    std::vector<int32_t> scanned;
    for (const Span& s : spans) {
      const std::string_view span = std::string_view(text).substr(s.begin, s.end - s.begin);
      const auto st = tok->pretokenizer().ForEachPiece(span, 0, [&](size_t b, size_t e) {
        EncodePiece(span.substr(b, e - b), tok->vocab().ranks(), &scanned);
        return true;
      });
      if (!st.ok()) std::abort();
    }
    if (scanned != *ids) std::abort();
  }
  const RankMap& ranks = (*Tokenizers())[0]->vocab().ranks();
  const std::string piece = text.substr(0, kLinearBpeMax);
  if (!piece.empty()) {
    std::vector<int32_t> a, b;
    BpeLinear(piece, ranks, &a);
    BpeHeap(piece, ranks, &b);
    if (a != b) std::abort();
  }
  // Shrunken Kimi limits: spans must tile the input exactly.
  size_t pos = 0;
  for (const Span& s : KimiSplit(text, 7, 3)) {
    if (s.begin != pos || s.end <= s.begin) std::abort();
    pos = s.end;
  }
  if (pos != text.size()) std::abort();
  return 0;
}
