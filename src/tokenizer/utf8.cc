// UTF-8 validation, Python isspace and the streaming decoder (see utf8.h).
#include "tokenizer/utf8.h"

namespace deltafin::tokenizer {

namespace {

// Length of the well-formed sequence at s[0..n) (1..4), 0 if it is invalid, or -1 if it is a valid
// prefix cut short by the end of the buffer. Bounds follow Unicode Table 3-7.
int SequenceLength(const unsigned char* s, size_t n) {
  const unsigned char b0 = s[0];
  if (b0 < 0x80) return 1;
  int len;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (int i = 1; i < len; ++i) {
    if (static_cast<size_t>(i) >= n) return -1;
    const unsigned char lo_i = i == 1 ? lo : 0x80, hi_i = i == 1 ? hi : 0xBF;
    if (s[i] < lo_i || s[i] > hi_i) return 0;
  }
  return len;
}

// Number of bytes forming the maximal invalid subpart at s (at least 1): the lead byte plus the
// continuation bytes that were still acceptable.
size_t InvalidSpan(const unsigned char* s, size_t n) {
  size_t k = 1;
  for (size_t cut = 2; cut <= 4 && cut <= n; ++cut) {
    if (SequenceLength(s, cut - 1) == -1 && SequenceLength(s, cut) != 0) {
      k = cut;
    } else {
      break;
    }
  }
  return k;
}

constexpr char kReplacement[] = "\xEF\xBF\xBD";

}  // namespace

Status ValidateUtf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    // ASCII fast path, 8 bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      __builtin_memcpy(&w, s + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    const int len = SequenceLength(s + i, n - i);
    if (len <= 0) {
      return Status::Error("invalid UTF-8 at byte offset " + std::to_string(i) +
                           (len < 0 ? " (truncated sequence at end of input)" : ""));
    }
    i += static_cast<size_t>(len);
  }
  return Status::Ok();
}

bool IsPythonSpace(uint32_t cp) {
  if (cp <= 0x20) return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20);
  if (cp < 0x85) return false;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string Utf8StreamDecoder::Feed(std::string_view bytes) {
  pending_.append(bytes);
  std::string out;
  const auto* s = reinterpret_cast<const unsigned char*>(pending_.data());
  const size_t n = pending_.size();
  size_t i = 0;
  while (i < n) {
    const int len = SequenceLength(s + i, n - i);
    if (len == -1) break;  // hold back: the rest of this sequence has not arrived yet
    if (len == 0) {
      out += kReplacement;
      i += InvalidSpan(s + i, n - i);
      continue;
    }
    out.append(pending_, i, static_cast<size_t>(len));
    i += static_cast<size_t>(len);
  }
  pending_.erase(0, i);
  return out;
}

std::string Utf8StreamDecoder::Flush() {
  std::string out = pending_.empty() ? "" : kReplacement;
  pending_.clear();
  return out;
}

std::string DecodeUtf8Lossy(std::string_view bytes) {
  Utf8StreamDecoder d;
  std::string out = d.Feed(bytes);
  return out + d.Flush();
}

}  // namespace deltafin::tokenizer
