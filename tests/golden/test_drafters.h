// Test drafters shared by the golden speculation and generator tests (deltafin/speculate.h).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "deltafin/speculate.h"

namespace deltafin::testing {

// Offers a known continuation (usually the model's own greedy output) with every third draft
// wrong: verify passes that accept several drafts, and rejections at every row position.
class CorruptedReplay : public Drafter {
 public:
  CorruptedReplay(std::vector<int32_t> continuation, int64_t prompt, int64_t vocab)
      : inner_(std::move(continuation), prompt), prompt_(prompt), vocab_(vocab) {}
  int64_t Propose(std::span<const int32_t> context, std::span<int32_t> out) override {
    const int64_t n = inner_.Propose(context, out);
    const int64_t at = static_cast<int64_t>(context.size()) - prompt_;
    for (int64_t j = 0; j < n; ++j) {
      if ((at + j) % 3 == 2) out[j] = static_cast<int32_t>((out[j] + 1) % vocab_);
    }
    return n;
  }

 private:
  ReplayDrafter inner_;
  int64_t prompt_, vocab_;
};

}  // namespace deltafin::testing
