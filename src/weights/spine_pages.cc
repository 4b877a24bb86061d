#include "weights/spine_pages.h"

#include <unistd.h>

#include <algorithm>

#include "io/mapped_file.h"

namespace deltafin {

SpinePages::SpinePages(const ModelWeights& w, int readers) {
  page_ = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  groups_.resize(w.layers.size() + 1);
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const LayerWeights& lw = w.layers[i];
    std::vector<Chunk>* g = &groups_[i];
    ForEachSpineMatrix(lw, [&](const SpineMatrix& m, SpineRole) { Add(g, m); });
  }
  Add(&groups_.back(), w.lm_head);
  const size_t threads = static_cast<size_t>(std::max(readers, 1));
  residency_.assign(threads, std::vector<unsigned char>(kChunkBytes / page_));
  readers_.reserve(threads - 1);
  for (size_t i = 1; i < threads; ++i) readers_.emplace_back([this, i] { ReaderLoop(i); });
}

SpinePages::~SpinePages() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : readers_) t.join();
}

void SpinePages::Add(std::vector<Chunk>* group, const void* data, size_t bytes) {
  if (data == nullptr || bytes == 0) return;
  // Page-align by offsetting the pointer itself (no integer-to-pointer cast).
  const auto start = reinterpret_cast<uintptr_t>(data);
  const uintptr_t begin = start & ~(static_cast<uintptr_t>(page_) - 1);
  const uintptr_t end = (start + bytes + page_ - 1) & ~(static_cast<uintptr_t>(page_) - 1);
  const uint8_t* first = static_cast<const uint8_t*>(data) - (start - begin);
  const auto total = static_cast<size_t>(end - begin);
  for (size_t off = 0; off < total; off += kChunkBytes) {
    group->push_back({first + off, std::min(kChunkBytes, total - off)});
  }
}

void SpinePages::Add(std::vector<Chunk>* group, const SpineMatrix& m) {
  const auto elements = static_cast<size_t>(m.rows) * static_cast<size_t>(m.cols);
  // The int8 spine computes from its own mapped copy; the BF16 pages are then never touched.
  if (m.q != nullptr) {
    Add(group, m.q, elements);
  } else {
    Add(group, m.data, elements * sizeof(uint16_t));
  }
}

void SpinePages::Drain(std::vector<unsigned char>* residency) {
  const std::vector<Chunk>& chunks = *work_;
  uint64_t missing = 0;
  for (size_t c = next_chunk_.fetch_add(1); c < chunks.size(); c = next_chunk_.fetch_add(1)) {
    missing += PageInMappedRange(chunks[c].begin, chunks[c].bytes, residency->data());
  }
  missing_pages_.fetch_add(missing);
}

void SpinePages::ReaderLoop(size_t index) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    Drain(&residency_[index]);
    std::lock_guard<std::mutex> lock(mutex_);
    if (--busy_readers_ == 0) done_.notify_one();
  }
}

uint64_t SpinePages::MakeResident(int64_t group) {
  work_ = &groups_[static_cast<size_t>(group)];
  next_chunk_.store(0);
  missing_pages_.store(0);
  if (!readers_.empty()) {
    std::lock_guard<std::mutex> lock(mutex_);
    busy_readers_ = static_cast<int>(readers_.size());
    ++generation_;
  }
  wake_.notify_all();
  Drain(&residency_[0]);
  if (!readers_.empty()) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return busy_readers_ == 0; });
  }
  return missing_pages_.load() * page_;
}

}  // namespace deltafin
