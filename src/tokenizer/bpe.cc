// The BPE merge loops (bpe.h).
#include "tokenizer/bpe.h"

#include <queue>
#include <utility>

namespace deltafin::tokenizer {

void BpeLinear(std::string_view piece, const RankMap& ranks, std::vector<int32_t>* out) {
  const size_t n = piece.size();
  if (n == 1) {
    out->push_back(static_cast<int32_t>(ranks.Find(piece.data(), 1)));
    return;
  }
  // parts[i] = (start of part i, rank of merging part i with part i+1). n+1 entries: the last is
  // the end sentinel. Fixed-size stack storage: pieces here are at most kLinearBpeMax bytes.
  struct Part {
    uint32_t start;
    uint32_t rank;
  };
  Part parts[kLinearBpeMax + 2];
  size_t count = n + 1;
  const char* p = piece.data();
  for (size_t i = 0; i + 1 < n; ++i) parts[i] = {static_cast<uint32_t>(i), ranks.Find(p + i, 2)};
  parts[n - 1] = {static_cast<uint32_t>(n - 1), kNoRank};
  parts[n] = {static_cast<uint32_t>(n), kNoRank};
  auto pair_rank = [&](size_t i) -> uint32_t {
    if (i + 2 >= count) return kNoRank;
    return ranks.Find(p + parts[i].start, parts[i + 2].start - parts[i].start);
  };
  while (true) {
    uint32_t best = kNoRank;
    size_t bi = 0;
    for (size_t i = 0; i + 1 < count; ++i) {
      if (parts[i].rank < best) {  // strict: leftmost wins ties
        best = parts[i].rank;
        bi = i;
      }
    }
    if (best == kNoRank) break;
    // Merge part bi with bi+1, then refresh the two pair ranks that changed.
    for (size_t j = bi + 1; j + 1 < count; ++j) parts[j] = parts[j + 1];
    --count;
    parts[bi].rank = pair_rank(bi);
    if (bi > 0) parts[bi - 1].rank = pair_rank(bi - 1);
  }
  for (size_t i = 0; i + 1 < count; ++i) {
    out->push_back(
        static_cast<int32_t>(ranks.Find(p + parts[i].start, parts[i + 1].start - parts[i].start)));
  }
}

void BpeHeap(std::string_view piece, const RankMap& ranks, std::vector<int32_t>* out) {
  const size_t n = piece.size();
  const char* p = piece.data();
  // Doubly linked list of parts indexed by start byte; next[i] == n marks the last part.
  std::vector<uint32_t> next(n), prev(n), pair(n, kNoRank);
  std::vector<char> alive(n, 1);
  for (size_t i = 0; i < n; ++i) {
    next[i] = static_cast<uint32_t>(i + 1);
    prev[i] = static_cast<uint32_t>(i == 0 ? 0 : i - 1);
  }
  auto pair_rank = [&](uint32_t i) -> uint32_t {
    const uint32_t j = next[i];
    if (j >= n) return kNoRank;
    const uint32_t end = next[j];
    return ranks.Find(p + i, end - i);
  };
  using Entry = std::pair<uint32_t, uint32_t>;  // (rank, start): the min is lowest rank, leftmost
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  for (uint32_t i = 0; i + 1 < n; ++i) {
    pair[i] = pair_rank(i);
    if (pair[i] != kNoRank) heap.push({pair[i], i});
  }
  // An entry is current when its part is alive and still has that pair rank; every current pair
  // has an entry, so the first current entry popped is the global (rank, position) minimum.
  while (!heap.empty()) {
    const auto [rank, i] = heap.top();
    heap.pop();
    if (!alive[i] || pair[i] != rank) continue;
    const uint32_t j = next[i];
    alive[j] = 0;
    next[i] = next[j];
    if (next[j] < n) prev[next[j]] = i;
    pair[i] = pair_rank(i);
    if (pair[i] != kNoRank) heap.push({pair[i], i});
    if (i > 0) {
      const uint32_t h = prev[i];
      pair[h] = pair_rank(h);
      if (pair[h] != kNoRank) heap.push({pair[h], h});
    }
  }
  for (uint32_t i = 0; i < n; i = next[i]) {
    out->push_back(static_cast<int32_t>(ranks.Find(p + i, next[i] - i)));
  }
}

void EncodePiece(std::string_view piece, const RankMap& ranks, std::vector<int32_t>* out) {
  const uint32_t whole = ranks.Find(piece);
  if (whole != kNoRank) {
    out->push_back(static_cast<int32_t>(whole));
  } else if (piece.size() <= kLinearBpeMax) {
    BpeLinear(piece, ranks, out);
  } else {
    BpeHeap(piece, ranks, out);
  }
}

}  // namespace deltafin::tokenizer
