// PCRE2 compilation of the pre-tokenization patterns (see pretokenizer.h for the rewrites).
#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace deltafin::tokenizer {

namespace {

// Unicode White_Space, the meaning of \s in Rust's regex crate.
constexpr std::string_view kWs =
    R"(\t\n\x{0B}\f\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

constexpr const char* kK3Published =
    R"([\p{Han}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kCl100kPublished =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kO200kPublished =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Rewrites the published syntax into PCRE2 syntax: \s, \S (inside and outside classes), the two
// K3 intersection classes and \p{Han}.
std::string Rewrite(std::string_view p) {
  const std::string ws(kWs);
  // (Lu|Lt|Lm|Lo|M) minus Han, and (Ll|Lm|Lo|M) minus Han, as complements (see header).
  const std::pair<std::string_view, std::string> kClasses[] = {
      {R"([\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]])",
       R"([^\p{Ll}\p{N}\p{P}\p{S}\p{Z}\p{C}\p{sc:Han}])"},
      {R"([\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]])",
       R"([^\p{Lu}\p{Lt}\p{N}\p{P}\p{S}\p{Z}\p{C}\p{sc:Han}])"},
      {R"([\p{Han}])", R"([\p{sc:Han}])"},
  };
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size();) {
    bool replaced = false;
    for (const auto& [from, to] : kClasses) {
      if (!in_class && p.substr(i, from.size()) == from) {
        out += to;
        i += from.size();
        replaced = true;
        break;
      }
    }
    if (replaced) continue;
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char n = p[i + 1];
      if (n == 's') {
        out += in_class ? ws : "[" + ws + "]";
      } else if (n == 'S') {
        out += "[^" + ws + "]";  // never used inside a class by these patterns
      } else {
        out += p.substr(i, 2);
      }
      i += 2;
      continue;
    }
    if (c == '[' && !in_class)
      in_class = true;
    else if (c == ']' && in_class)
      in_class = false;
    out += c;
    ++i;
  }
  return out;
}

}  // namespace

Result<PatternKind> ParsePatternKind(std::string_view name) {
  if (name == "k3") return PatternKind::kK3;
  if (name == "cl100k") return PatternKind::kCl100k;
  if (name == "o200k") return PatternKind::kO200k;
  return Status::Error("unknown pattern '" + std::string(name) +
                       "' (expected k3, cl100k or o200k)");
}

const char* PublishedPattern(PatternKind kind) {
  switch (kind) {
    case PatternKind::kK3:
      return kK3Published;
    case PatternKind::kCl100k:
      return kCl100kPublished;
    case PatternKind::kO200k:
      return kO200kPublished;
  }
  return kK3Published;
}

std::string Pcre2Pattern(PatternKind kind) { return Rewrite(PublishedPattern(kind)); }

Result<std::unique_ptr<PreTokenizer>> PreTokenizer::Create(PatternKind kind) {
  const std::string pattern = Pcre2Pattern(kind);
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &err_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    return Status::Error("pcre2 compile failed at offset " + std::to_string(err_offset) + ": " +
                         reinterpret_cast<const char*>(msg));
  }
  // JIT is an optimisation only: without it (e.g. a platform PCRE2 built without JIT) the
  // interpreter gives the same matches.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  std::unique_ptr<PreTokenizer> p(new PreTokenizer());
  p->code_ = code;
  return p;
}

PreTokenizer::~PreTokenizer() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void* PreTokenizer::NewMatchData() const {
  return pcre2_match_data_create_from_pattern(static_cast<pcre2_code*>(code_), nullptr);
}

void PreTokenizer::FreeMatchData(void* md) {
  pcre2_match_data_free(static_cast<pcre2_match_data*>(md));
}

int PreTokenizer::Next(std::string_view text, size_t from, void* match_data, size_t* begin,
                       size_t* end) const {
  auto* md = static_cast<pcre2_match_data*>(match_data);
  // NO_UTF_CHECK: the tokenizer validated the whole input once; PCRE2 would otherwise re-check
  // the remaining text on every call (quadratic).
  const int rc =
      pcre2_match(static_cast<pcre2_code*>(code_), reinterpret_cast<PCRE2_SPTR>(text.data()),
                  text.size(), from, PCRE2_NO_UTF_CHECK, md, nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return 0;
  if (rc < 0) return -1;
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
  *begin = ov[0];
  *end = ov[1];
  return ov[1] > ov[0] ? 1 : -1;  // no pattern here can match empty; never loop on one
}

}  // namespace deltafin::tokenizer
