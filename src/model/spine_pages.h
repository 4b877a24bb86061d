// SpinePages: brings a layer's mapped spine matrices into RAM before the layer runs, so the time a
// spine that does not fit in RAM spends coming from disk is measured (OpFamily::kSpineIoWait)
// instead of hiding inside the kernels' page faults.
//
// Per layer, used when the memory plan says the spine is not resident (docs/STREAMING.md): then
// most of a layer's pages were evicted since the last token and must be read again anyway.
// mincore() finds the missing pages; if any, madvise(MADV_WILLNEED) starts readahead over the
// matrix and one byte per missing page is read, which waits for it. The bytes are not changed or
// copied, so results are the same. A resident spine does not page in per layer: with streamed
// experts the engine brings every group in once at load (Engine::Load, after turning off fault
// read-around), with mapped experts its first token's faults are charged to the ops that touch
// them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/weights.h"

namespace deltafin {

class SpinePages {
 public:
  // Groups 0..layers-1: each decoder layer's matrices; group `layers`: lm_head. Reserves the
  // mincore vector for the largest matrix, so MakeResident does not allocate.
  explicit SpinePages(const ModelWeights& weights);
  int64_t tail_group() const { return static_cast<int64_t>(groups_.size()) - 1; }
  // Makes every page of the group's matrices resident; returns the bytes of the pages that were
  // missing (what had to come from disk, readahead beyond them not counted).
  uint64_t MakeResident(int64_t group);

 private:
  struct Range {
    const uint8_t* begin;  // page-aligned
    size_t bytes;          // a whole number of pages
  };
  void Add(std::vector<Range>* group, const void* data, size_t bytes);
  void Add(std::vector<Range>* group, const SpineMatrix& m);

  size_t page_ = 4096;
  std::vector<std::vector<Range>> groups_;
  std::vector<unsigned char> residency_;  // mincore output for one range
};

}  // namespace deltafin
