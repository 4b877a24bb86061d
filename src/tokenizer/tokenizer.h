// Tokenizer: K3's encode/decode (docs/MODEL.md §5.3) over a Vocab and a PreTokenizer.
//
// Encode = validate UTF-8 → (a K3 model folder only) split into slices of ≤ 400,000 code points and
// runs of ≤ 25,000 (non-)whitespace characters (tokenization_kimi.py) → optionally cut at allowed
// special-token spellings → pre-tokenize → BPE. Long ordinary spans can be encoded on several
// threads with identical results (see EncodeOrdinary in tokenizer.cc).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/vocab.h"

namespace deltafin::tokenizer {

struct EncodeOptions {
  // Special spellings to recognise in the text; everything else (the default: all of it) is
  // ordinary text, so a user typing "<|open|>" gets plain BPE ids.
  bool allow_all_special = false;
  std::vector<std::string> allowed_special;
  // Threads for long inputs; 0 = all cores. Results never depend on it.
  int threads = 1;
};

// How Encode cuts its input before anything else. The Kimi rule belongs to K3's tokenizer
// (tokenization_kimi.py wraps tiktoken with it, so a K3 model folder gets it), not to tiktoken or
// to a pattern: tiktoken pre-tokenizes the whole text with any pattern, K3's included, so a run of
// 25,001+ spaces stays one run there and cutting it would change the ids wherever the vocabulary
// merges long space runs.
enum class InputSplit { kNone, kKimi };

class Tokenizer {
 public:
  // A model folder: tiktoken.model + tokenizer_config.json, K3's pattern and the Kimi split (K3's
  // tokenizer, tokenization_kimi.py).
  static Result<std::unique_ptr<Tokenizer>> LoadModelDir(const std::string& dir);
  // tiktoken's rule: the whole text is pre-tokenized at once (InputSplit::kNone), whatever the
  // pattern.
  static Result<std::unique_ptr<Tokenizer>> Create(Vocab vocab, PatternKind pattern);
  static Result<std::unique_ptr<Tokenizer>> Create(Vocab vocab, PatternKind pattern,
                                                   InputSplit split);

  Result<std::vector<int32_t>> Encode(std::string_view text,
                                      const EncodeOptions& options = {}) const;
  // Appends the ids of `text` as ordinary text, without the Kimi splitting. `text` must be valid
  // UTF-8. Used for chat segments after splitting and by the parallel path.
  Status EncodeOrdinary(std::string_view text, int threads, std::vector<int32_t>* out) const;
  // Concatenated token bytes (may be invalid UTF-8 when cut mid-character); unknown ids → error.
  Result<std::string> Decode(const std::vector<int32_t>& ids) const;
  // Id of a special spelling, or -1.
  int32_t SpecialId(std::string_view content) const;

  const Vocab& vocab() const { return vocab_; }
  const PreTokenizer& pretokenizer() const { return *pre_; }
  InputSplit input_split() const { return split_; }

 private:
  Tokenizer(Vocab vocab, std::unique_ptr<PreTokenizer> pre, InputSplit split)
      : vocab_(std::move(vocab)), pre_(std::move(pre)), split_(split) {}
  Status EncodeSpan(std::string_view text, const EncodeOptions& options,
                    std::vector<int32_t>* out) const;
  Status EncodeParallel(std::string_view text, int threads, std::vector<int32_t>* out) const;

  Vocab vocab_;
  std::unique_ptr<PreTokenizer> pre_;
  InputSplit split_;
};

// The Kimi splitting rule: byte ranges of `text` (valid UTF-8), each at most `max_chars` code
// points long and with no run of > `max_run` consecutive whitespace (str.isspace) or
// non-whitespace characters. Mirrors tokenization_kimi.py exactly, including that the 400,000
// slices are cut first.
struct Span {
  size_t begin, end;
};
std::vector<Span> KimiSplit(std::string_view text, size_t max_chars = 400000,
                            size_t max_run = 25000);

}  // namespace deltafin::tokenizer
