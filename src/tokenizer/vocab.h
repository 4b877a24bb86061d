// Vocab: the BPE rank table (tiktoken.model) and the special tokens (tokenizer_config.json).
//
// Every rank file a model ships is validated line by line, because a silently wrong rank table
// turns the model into a different model: bad base64, a missing or duplicate rank, ranks out of
// order and duplicate token bytes are errors that name the file and line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace deltafin::tokenizer {

inline constexpr uint32_t kNoRank = 0xFFFFFFFFu;

// Open-addressing map from token bytes to rank. Token bytes live in one arena; a slot holds the
// arena offset, length and rank, so lookups of short byte strings touch one or two cache lines.
class RankMap {
 public:
  void Build(const std::vector<std::string>& tokens);
  uint32_t Find(const char* data, size_t size) const {
    if (slots_.empty()) return kNoRank;
    size_t i = Hash(data, size) & mask_;
    while (true) {
      const Slot& s = slots_[i];
      if (s.rank == kNoRank) return kNoRank;
      if (s.size == size && __builtin_memcmp(arena_.data() + s.offset, data, size) == 0) {
        return s.rank;
      }
      i = (i + 1) & mask_;
    }
  }
  uint32_t Find(std::string_view bytes) const { return Find(bytes.data(), bytes.size()); }

  static uint64_t Hash(const char* data, size_t size);

 private:
  struct Slot {
    uint32_t offset;
    uint32_t size;
    uint32_t rank = kNoRank;
  };
  std::vector<Slot> slots_;
  std::string arena_;
  size_t mask_ = 0;
};

struct SpecialToken {
  std::string content;
  uint32_t id;
};

class Vocab {
 public:
  // Parses tiktoken rank-file text ("<base64> <rank>" per line, ranks 0..n-1 in order).
  // `name` names the file in error messages.
  static Result<Vocab> FromTiktoken(std::string_view text, const std::string& name);
  static Result<Vocab> LoadTiktoken(const std::string& path);

  // Reads added_tokens_decoder of a tokenizer_config.json. Every id must lie in
  // [num_ranks, num_ranks + kNumReserved): K3 reserves 256 ids after the ranks, whose spellings
  // default to <|reserved_token_{id}|> (docs/MODEL.md §5.1). Ids elsewhere are an error.
  Status LoadSpecialsFromConfig(std::string_view json_text, const std::string& name);
  // Adds special tokens directly (cl100k/o200k style vocabularies, tests).
  Status AddSpecial(const std::string& content, uint32_t id);
  // Fills the K3 reserved range with <|reserved_token_{id}|> (before the config overrides).
  void AddReservedSpecials();

  static constexpr uint32_t kNumReserved = 256;

  uint32_t num_ranks() const { return static_cast<uint32_t>(tokens_.size()); }
  // One past the largest id (ranks and specials).
  uint32_t vocab_size() const { return vocab_size_; }
  const RankMap& ranks() const { return map_; }
  std::string_view TokenBytes(uint32_t rank) const { return tokens_[rank]; }
  const std::vector<SpecialToken>& specials() const { return specials_; }
  // Id of a special spelling, or kNoRank.
  uint32_t SpecialId(std::string_view content) const;
  // Bytes of any id (rank or special); false if the id is unknown.
  bool IdBytes(uint32_t id, std::string_view* bytes) const;

 private:
  std::vector<std::string> tokens_;
  RankMap map_;
  std::vector<SpecialToken> specials_;
  std::vector<int32_t> special_index_;  // id - num_ranks -> index into specials_, or -1
  uint32_t vocab_size_ = 0;
};

// Standard base64 decode (RFC 4648 alphabet, '=' padding required to a multiple of 4).
bool Base64Decode(std::string_view in, std::string* out);

}  // namespace deltafin::tokenizer
