// SpinePages: brings a mapped spine's matrices into RAM, group by group, over their exact ranges.
//
// Used once at load when the spine is resident and the experts stream (Engine::Load, after
// turning off fault read-around): a fault's read-around would otherwise also bring in the expert
// bytes next to each spine tensor, page cache the memory plan did not count. A spine that does
// not fit is not mapped for compute at all: it streams through weights/spine_ring.h.
// The matrices are cut into chunks of at most 1 MiB at construction; `readers` threads (the
// caller among them) take chunks in turn, and for each one mincore() finds the missing pages,
// madvise(MADV_WILLNEED) starts readahead over it and one byte per missing page is read, which
// waits for it. Several threads keep the disk's queue full. The bytes are not changed or copied.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "weights/weights.h"

namespace deltafin {

class SpinePages {
 public:
  // Groups 0..layers-1: each decoder layer's matrices; group `layers`: lm_head. Starts
  // `readers` - 1 threads (they sleep between calls) and reserves every buffer MakeResident
  // uses, so it does not allocate.
  SpinePages(const ModelWeights& weights, int readers);
  ~SpinePages();
  SpinePages(const SpinePages&) = delete;
  SpinePages& operator=(const SpinePages&) = delete;

  int64_t tail_group() const { return static_cast<int64_t>(groups_.size()) - 1; }
  // Makes every page of the group's matrices resident; returns the bytes of the pages that were
  // missing (what had to come from disk, readahead beyond them not counted).
  uint64_t MakeResident(int64_t group);

 private:
  struct Chunk {
    const uint8_t* begin;  // page-aligned
    size_t bytes;          // a whole number of pages, at most kChunkBytes
  };
  static constexpr size_t kChunkBytes = size_t{1} << 20;
  void Add(std::vector<Chunk>* group, const void* data, size_t bytes);
  void Add(std::vector<Chunk>* group, const SpineMatrix& m);
  // Takes chunks of the current group until none is left; `residency` is this thread's buffer.
  void Drain(std::vector<unsigned char>* residency);
  void ReaderLoop(size_t index);

  size_t page_ = 4096;
  std::vector<std::vector<Chunk>> groups_;
  std::vector<std::vector<unsigned char>> residency_;  // mincore output, one per thread

  // The call in progress: the chunks of one group, taken by index.
  const std::vector<Chunk>* work_ = nullptr;
  std::atomic<size_t> next_chunk_{0};
  std::atomic<uint64_t> missing_pages_{0};
  std::mutex mutex_;
  std::condition_variable wake_;  // readers: a new call (generation_) or stop_
  std::condition_variable done_;  // the caller: busy_readers_ == 0
  uint64_t generation_ = 0;
  int busy_readers_ = 0;
  bool stop_ = false;
  std::vector<std::thread> readers_;
};

}  // namespace deltafin
