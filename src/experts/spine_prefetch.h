// SpinePrefetch: for a spine that does not fit the memory budget (it stays memory-mapped and the
// kernel drops its pages under the limit), asks the kernel to start reading the next layer's
// spine pages while the current layer computes (madvise MADV_WILLNEED: asynchronous readahead
// into the page cache), so the page faults of the next layer find them there. Advice only: it
// changes no byte the forward pass reads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/weights.h"

namespace deltafin {

class SpinePrefetch {
 public:
  // Page-aligned address ranges of every spine tensor of every layer (and of lm_head, advised
  // with the last layer), merged where adjacent.
  explicit SpinePrefetch(const ModelWeights& weights);
  // Starts readahead of layer `layer`'s spine (no-op past the last layer).
  void AdviseLayer(int64_t layer) const;
  uint64_t LayerBytes(int64_t layer) const;

 private:
  struct Range {
    uintptr_t begin, end;
  };
  std::vector<std::vector<Range>> layers_;
};

}  // namespace deltafin
