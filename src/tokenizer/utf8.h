// UTF-8 helpers for the tokenizer: validation with the offending byte offset, code point
// iteration, Python's str.isspace (the Kimi splitting rule is defined in Python terms), and a
// streaming decoder that never emits a partial sequence.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace deltafin::tokenizer {

// Ok if `text` is well-formed UTF-8 (no overlongs, surrogates or values above U+10FFFF);
// otherwise an error naming the byte offset of the first bad sequence.
Status ValidateUtf8(std::string_view text);

// Decodes the code point starting at text[*pos] and advances *pos past it. Requires valid UTF-8.
inline uint32_t NextCodePoint(std::string_view text, size_t* pos) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data()) + *pos;
  if (s[0] < 0x80) {
    *pos += 1;
    return s[0];
  }
  if (s[0] < 0xE0) {
    *pos += 2;
    return ((s[0] & 0x1Fu) << 6) | (s[1] & 0x3Fu);
  }
  if (s[0] < 0xF0) {
    *pos += 3;
    return ((s[0] & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu);
  }
  *pos += 4;
  return ((s[0] & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) | (s[3] & 0x3Fu);
}

// Python's str.isspace(): bidi class WS/B/S or category Zs. Unlike Unicode White_Space this
// includes U+001C..U+001F.
bool IsPythonSpace(uint32_t cp);

// Appends the UTF-8 encoding of `cp` to `out`.
void AppendUtf8(uint32_t cp, std::string* out);

// Turns a byte stream into text chunk by chunk. Complete sequences are emitted as they arrive;
// an incomplete trailing sequence is held back until its remaining bytes come; invalid bytes
// become U+FFFD (one per maximal invalid subpart, as Python's errors="replace" does).
class Utf8StreamDecoder {
 public:
  // Returns the text that became complete with `bytes`.
  std::string Feed(std::string_view bytes);
  // Returns what is held back, with an incomplete tail replaced by U+FFFD, and resets.
  std::string Flush();

 private:
  std::string pending_;
};

// Lossy one-shot decode (as Utf8StreamDecoder Feed + Flush).
std::string DecodeUtf8Lossy(std::string_view bytes);

}  // namespace deltafin::tokenizer
