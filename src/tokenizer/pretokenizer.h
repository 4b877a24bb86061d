// Pre-tokenizer: splits ordinary text into the pieces BPE encodes, with PCRE2 (UTF + UCP + JIT).
//
// The published patterns are written for Rust's regex/fancy-regex (what tiktoken runs). PCRE2
// differs in two places, so the patterns are compiled in a rewritten but equivalent form:
//  - `&&` class intersection (K3): PCRE2 10.42 has none. [A&&[^\p{Han}]] is written as the
//    complement of (every general category outside A) ∪ Han, which is exact because general
//    categories partition the code points (unassigned ones are Cn).
//  - `\s`/`\S`: Rust means Unicode White_Space; PCRE2 with UCP leaves out U+0085, so the class is
//    spelled out.
//  - `\p{Han}`: Rust means Script=Han; PCRE2 10.40+ matches Script_Extensions, so `\p{sc:Han}`.
// Both engines are leftmost-first backtracking for these patterns, so the pieces are identical
// for every code point the two Unicode tables agree on (PCRE2 10.42 ships Unicode 14).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"

namespace deltafin::tokenizer {

enum class PatternKind { kK3, kCl100k, kO200k };

// "k3" | "cl100k" | "o200k".
Result<PatternKind> ParsePatternKind(std::string_view name);
// The pattern as published (what tiktoken and the oracle tests use).
const char* PublishedPattern(PatternKind kind);
// The PCRE2 form actually compiled.
std::string Pcre2Pattern(PatternKind kind);

class PreTokenizer {
 public:
  static Result<std::unique_ptr<PreTokenizer>> Create(PatternKind kind);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Iterates the matches in text[start..) like Rust's find_iter: each search starts where the
  // previous match ended. `text` must be valid UTF-8 (checked by the caller once).
  // fn(begin, end) receives byte offsets into `text`; returns false to stop early. Thread-safe
  // (each call uses its own match data).
  template <typename Fn>
  Status ForEachPiece(std::string_view text, size_t start, Fn&& fn) const;

  // Finds the next match at or after `from`: 1 if found, 0 if none, -1 on a PCRE2 failure
  // (resource limits), which must not pass silently as "no more pieces".
  int Next(std::string_view text, size_t from, void* match_data, size_t* begin, size_t* end) const;
  void* NewMatchData() const;
  static void FreeMatchData(void* md);

 private:
  PreTokenizer() = default;
  void* code_ = nullptr;  // pcre2_code_8*
};

template <typename Fn>
Status PreTokenizer::ForEachPiece(std::string_view text, size_t start, Fn&& fn) const {
  void* md = NewMatchData();
  if (md == nullptr) return Status::Error("pcre2: out of memory");
  size_t pos = start, b = 0, e = 0;
  int rc = 0;
  while (pos < text.size() && (rc = Next(text, pos, md, &b, &e)) > 0) {
    if (!fn(b, e)) break;
    pos = e;
  }
  FreeMatchData(md);
  if (rc < 0)
    return Status::Error("pre-tokenizer: PCRE2 match failed near byte " + std::to_string(pos));
  return Status::Ok();
}

}  // namespace deltafin::tokenizer
