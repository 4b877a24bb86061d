// Incremental detokenizer: generated ids → text, one id at a time, for showing a generation as it
// happens (`deltafin run`). Each Feed returns only complete UTF-8: a character whose bytes are
// split over several tokens is held back until its last byte arrives, so a terminal never shows
// half a character, and the concatenation of everything Feed and Finish return equals the lossy
// decode of the whole sequence, DecodeUtf8Lossy(Decode(ids)), when no id is special.
//
// Special ids (≥ the vocabulary's rank count: <|open|>, the end-of-text token, reserved ids) are
// hidden by default: they carry structure, not text. With show_special their spellings appear in
// place. Either way a special id ends any incomplete character before it (shown as U+FFFD), as a
// special token can never continue a byte sequence.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace deltafin::tokenizer {

class StreamDetokenizer {
 public:
  StreamDetokenizer(const Tokenizer& tokenizer, bool show_special)
      : tok_(tokenizer), show_special_(show_special) {}
  // Appends to *text what `id` completes. An id outside the vocabulary is an error (nothing is
  // appended for it).
  Status Feed(int32_t id, std::string* text);
  // Appends what is held back (an incomplete tail becomes U+FFFD) and starts over.
  void Finish(std::string* text);

 private:
  const Tokenizer& tok_;
  const bool show_special_;
  Utf8StreamDecoder utf8_;
};

}  // namespace deltafin::tokenizer
