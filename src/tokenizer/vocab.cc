// Rank-file parsing and validation, the special-token table and the rank hash map (vocab.h).
#include "tokenizer/vocab.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "io/mapped_file.h"

namespace deltafin::tokenizer {

uint64_t RankMap::Hash(const char* data, size_t size) {
  // A multiply-xorshift mix over 8-byte words: BPE keys are mostly 2..16 bytes, so this is a
  // couple of multiplies per lookup.
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (size * 0xFF51AFD7ED558CCDull);
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t w;
    std::memcpy(&w, data + i, 8);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  if (i < size) {
    uint64_t w = 0;
    std::memcpy(&w, data + i, size - i);
    h = (h ^ w) * 0x94D049BB133111EBull;
    h ^= h >> 29;
  }
  return h * 0xBF58476D1CE4E5B9ull >> 16;
}

void RankMap::Build(const std::vector<std::string>& tokens) {
  size_t cap = 16;
  while (cap < tokens.size() * 2) cap <<= 1;
  slots_.assign(cap, Slot{});
  mask_ = cap - 1;
  arena_.clear();
  for (size_t r = 0; r < tokens.size(); ++r) {
    const std::string& t = tokens[r];
    size_t i = Hash(t.data(), t.size()) & mask_;
    while (slots_[i].rank != kNoRank) i = (i + 1) & mask_;
    slots_[i] = Slot{static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(t.size()),
                     static_cast<uint32_t>(r)};
    arena_ += t;
  }
}

bool Base64Decode(std::string_view in, std::string* out) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  out->clear();
  if (in.empty() || in.size() % 4 != 0) return false;
  for (size_t i = 0; i < in.size(); i += 4) {
    const bool last = i + 4 == in.size();
    const int pad = (in[i + 3] == '=') + (in[i + 2] == '=' && in[i + 3] == '=');
    if (pad && !last) return false;
    int v[4];
    for (int k = 0; k < 4 - pad; ++k) {
      v[k] = value(in[i + k]);
      if (v[k] < 0) return false;
    }
    const uint32_t n = (static_cast<uint32_t>(v[0]) << 18) | (static_cast<uint32_t>(v[1]) << 12) |
                       (pad < 2 ? static_cast<uint32_t>(v[2]) << 6 : 0) |
                       (pad < 1 ? static_cast<uint32_t>(v[3]) : 0);
    out->push_back(static_cast<char>(n >> 16));
    if (pad < 2) out->push_back(static_cast<char>((n >> 8) & 0xFF));
    if (pad < 1) out->push_back(static_cast<char>(n & 0xFF));
  }
  return true;
}

Result<Vocab> Vocab::FromTiktoken(std::string_view text, const std::string& name) {
  Vocab v;
  size_t pos = 0;
  size_t line_no = 0;
  std::string bytes;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;  // tiktoken's loader skips blank lines
    const std::string where = name + ":" + std::to_string(line_no) + ": ";
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos) {
      return Status::Error(where + "expected '<base64> <rank>'");
    }
    if (!Base64Decode(line.substr(0, space), &bytes)) {
      return Status::Error(where + "bad base64 '" + std::string(line.substr(0, space)) + "'");
    }
    const std::string_view rank_text = line.substr(space + 1);
    uint64_t rank = 0;
    bool digits = !rank_text.empty() && rank_text.size() <= 10;
    for (char c : rank_text) {
      digits = digits && c >= '0' && c <= '9';
      rank = rank * 10 + static_cast<uint64_t>(c - '0');
    }
    if (!digits) return Status::Error(where + "bad rank '" + std::string(rank_text) + "'");
    const uint64_t expected = v.tokens_.size();
    if (rank != expected) {
      const char* what = rank < expected ? "duplicate or out-of-order" : "missing ranks before";
      return Status::Error(where + std::string(what) + " rank " + std::to_string(rank) +
                           " (expected " + std::to_string(expected) + ")");
    }
    if (expected >= 0x7FFFFFFFu - kNumReserved) return Status::Error(where + "too many ranks");
    v.tokens_.push_back(bytes);
  }
  if (v.tokens_.empty()) return Status::Error(name + ": no ranks");
  v.map_.Build(v.tokens_);
  // Duplicate token bytes would make the encoder's choice depend on hash order.
  for (uint32_t r = 0; r < v.tokens_.size(); ++r) {
    if (v.map_.Find(v.tokens_[r]) != r) {
      return Status::Error(name + ":" + std::to_string(r + 1) + ": token bytes of rank " +
                           std::to_string(r) + " duplicate rank " +
                           std::to_string(v.map_.Find(v.tokens_[r])));
    }
  }
  // Byte-level BPE starts from single bytes, so every byte must be a token (docs/MODEL.md §5.1).
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    if (v.map_.Find(&c, 1) == kNoRank) {
      return Status::Error(name + ": byte 0x" + "0123456789abcdef"[b >> 4] +
                           "0123456789abcdef"[b & 15] +
                           " has no rank (every byte must be a token)");
    }
  }
  v.vocab_size_ = v.num_ranks();
  return v;
}

Result<Vocab> Vocab::LoadTiktoken(const std::string& path) {
  DF_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return FromTiktoken(text, path);
}

Status Vocab::AddSpecial(const std::string& content, uint32_t id) {
  if (id < num_ranks()) {
    return Status::Error("special token '" + content + "' id " + std::to_string(id) +
                         " collides with a BPE rank");
  }
  if (content.empty()) return Status::Error("special token id " + std::to_string(id) + " is empty");
  const size_t slot = id - num_ranks();
  if (slot >= (1u << 20))
    return Status::Error("special token id " + std::to_string(id) + " too large");
  if (special_index_.size() <= slot) special_index_.resize(slot + 1, -1);
  if (special_index_[slot] >= 0) {
    specials_[static_cast<size_t>(special_index_[slot])].content = content;  // override
  } else {
    special_index_[slot] = static_cast<int32_t>(specials_.size());
    specials_.push_back(SpecialToken{content, id});
  }
  vocab_size_ = std::max(vocab_size_, id + 1);
  return Status::Ok();
}

void Vocab::AddReservedSpecials() {
  for (uint32_t k = 0; k < kNumReserved; ++k) {
    const uint32_t id = num_ranks() + k;
    (void)AddSpecial("<|reserved_token_" + std::to_string(id) + "|>", id);
  }
}

Status Vocab::LoadSpecialsFromConfig(std::string_view json_text, const std::string& name) {
  const auto json = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) return Status::Error(name + ": not a JSON object");
  const auto it = json.find("added_tokens_decoder");
  if (it == json.end() || !it->is_object()) {
    return Status::Error(name + ": missing object 'added_tokens_decoder'");
  }
  AddReservedSpecials();
  for (const auto& [key, entry] : it->items()) {
    const std::string where = name + ": added_tokens_decoder[\"" + key + "\"]";
    uint64_t id = 0;
    bool digits = !key.empty() && key.size() <= 10;
    for (char c : key) {
      digits = digits && c >= '0' && c <= '9';
      id = id * 10 + static_cast<uint64_t>(c - '0');
    }
    if (!digits) return Status::Error(where + ": key is not a token id");
    if (id < num_ranks() || id >= uint64_t{num_ranks()} + kNumReserved) {
      return Status::Error(where + ": id " + std::to_string(id) +
                           " is outside the special range [" + std::to_string(num_ranks()) + ", " +
                           std::to_string(num_ranks() + kNumReserved) + ") of this vocabulary");
    }
    if (!entry.is_object() || !entry.contains("content") || !entry["content"].is_string()) {
      return Status::Error(where + ": missing string 'content'");
    }
    DF_RETURN_IF_ERROR(AddSpecial(entry["content"].get<std::string>(), static_cast<uint32_t>(id))
                           .WithContext(where));
  }
  // Two ids with one spelling would make special matching ambiguous.
  std::vector<std::string> seen;
  for (const auto& s : specials_) seen.push_back(s.content);
  std::sort(seen.begin(), seen.end());
  const auto dup = std::adjacent_find(seen.begin(), seen.end());
  if (dup != seen.end())
    return Status::Error(name + ": special token '" + *dup + "' appears twice");
  return Status::Ok();
}

uint32_t Vocab::SpecialId(std::string_view content) const {
  for (const auto& s : specials_) {
    if (s.content == content) return s.id;
  }
  return kNoRank;
}

bool Vocab::IdBytes(uint32_t id, std::string_view* bytes) const {
  if (id < num_ranks()) {
    *bytes = tokens_[id];
    return true;
  }
  const size_t slot = id - num_ranks();
  if (slot >= special_index_.size() || special_index_[slot] < 0) return false;
  *bytes = specials_[static_cast<size_t>(special_index_[slot])].content;
  return true;
}

}  // namespace deltafin::tokenizer
