// A small, deterministic byte-level BPE vocabulary and the two tokenizer files K3 ships with it.
//
// make-model needs tokenizer files with exactly the structure of a real K3 download
// (`tiktoken.model` + `tokenizer_config.json`, docs/MODEL.md §5.1–5.2) but far fewer ranks, so the
// engine's tokenizer is exercised through the same code path as with the real 163,584-rank file.
// The vocabulary is built from data compiled into the binary, never from the network or the seed,
// so every generated model of a given vocabulary size carries the same tokenizer:
//
//   ranks 0..255   the single bytes (rank = byte value), as in every tiktoken file;
//   then           merges learned by a plain BPE trainer on an embedded English text (so ASCII
//                  prose tokenizes into plausible pieces);
//   then           if more ranks are asked for than that text yields, merges of deterministic
//                  pseudo-random pairs of existing tokens (short, word-like, all distinct).
//
// The 256 reserved special ids follow the ranks at K3's offsets ([BOS] = first special id, ...).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace deltafin {

// K3 reserves 256 special ids after the BPE ranks (docs/MODEL.md §5.1).
inline constexpr int64_t kNumSpecialTokens = 256;

// Offsets of the named specials from the first special id (K3: 163584 + offset, docs/MODEL.md
// §5.2).
inline constexpr int64_t kBosOffset = 0;                // [BOS]
inline constexpr int64_t kEosOffset = 2;                // <|end_of_msg|>: config eos / stop token
inline constexpr int64_t kMediaPlaceholderOffset = 21;  // <|media_pad|>
inline constexpr int64_t kPadOffset = 255;              // [PAD]

// Returns `num_ranks` distinct byte strings; element r is the token of rank r. Needs
// num_ranks >= 256 (the single bytes).
Result<std::vector<std::string>> BuildBpeVocab(int64_t num_ranks);

// Spelling of special token `first_special_id + offset` (offset in [0, 256)): K3's name for the
// named offsets, "<|reserved_token_{id}|>" for the rest.
std::string SpecialTokenContent(int64_t first_special_id, int64_t offset);

// `tiktoken.model`: one line per rank, "<standard base64 of the bytes> <rank>\n", ranks in order.
std::string TiktokenModelText(const std::vector<std::string>& tokens);

// `tokenizer_config.json` in the layout of K3's file: added_tokens_decoder for the 256 special ids
// starting at `first_special_id`, then the special-token roles and the TikTokenTokenizer class.
std::string TokenizerConfigJson(int64_t first_special_id, int64_t model_max_length);

// Standard base64 (RFC 4648 alphabet, '=' padding), as used by tiktoken files.
std::string Base64Encode(const std::string& bytes);

}  // namespace deltafin
