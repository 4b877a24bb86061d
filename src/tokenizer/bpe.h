// Byte-level BPE over one pre-tokenized piece: start from single bytes and repeatedly merge the
// adjacent pair whose concatenation has the lowest rank (leftmost on ties) until no adjacent pair
// is a token (docs/MODEL.md §5.3 step 4; tiktoken's byte_pair_merge).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/vocab.h"

namespace deltafin::tokenizer {

// Appends the ids of `piece` to `out`. If the whole piece is a token, that single rank
// (tiktoken's shortcut, which can differ from what merging would reach). Pieces up to
// kLinearBpeMax bytes use tiktoken's linear rescan; longer ones a heap, which picks the same
// (rank, position) minimum at every step in O(n log n) instead of O(n^2).
void EncodePiece(std::string_view piece, const RankMap& ranks, std::vector<int32_t>* out);

inline constexpr size_t kLinearBpeMax = 192;

// The two merge strategies, exposed for tests that check they agree on every input.
void BpeLinear(std::string_view piece, const RankMap& ranks, std::vector<int32_t>* out);
void BpeHeap(std::string_view piece, const RankMap& ranks, std::vector<int32_t>* out);

}  // namespace deltafin::tokenizer
