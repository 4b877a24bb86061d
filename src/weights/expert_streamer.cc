#include "weights/expert_streamer.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "base/check.h"
#include "io/direct_file.h"
#include "weights/tensor_roster.h"

namespace deltafin {

namespace {

constexpr size_t kArenaAlignment = 2u << 20;

class ShardSpanReader : public ExpertSpanReader {
 public:
  explicit ShardSpanReader(std::vector<DirectFile> files) : files_(std::move(files)) {}
  Result<const uint8_t*> Read(int shard, uint64_t offset, uint64_t length, uint8_t* buffer,
                              size_t capacity) override {
    return files_[static_cast<size_t>(shard)].ReadSpan(offset, length, buffer, capacity);
  }
  uint64_t DiskBytes(int shard, uint64_t offset, uint64_t length) const override {
    if (files_[static_cast<size_t>(shard)].mode() == ReadMode::kBuffered) return length;
    const uint64_t a = DirectFile::kIoAlignment;
    return (offset + length + a - 1) / a * a - offset / a * a;
  }
  std::string ShardPath(int shard) const override {
    return files_[static_cast<size_t>(shard)].path();
  }
  const char* ModeName() const override {
    for (const auto& f : files_) {
      if (f.size() > 0 && f.mode() == ReadMode::kBuffered) return "buffered";
    }
    return "direct";
  }

 private:
  std::vector<DirectFile> files_;  // indexed like Checkpoint::shard_paths(); unopened if unused
};

}  // namespace

Result<std::unique_ptr<ExpertSpanReader>> OpenShardSpanReader(const ModelWeights& weights,
                                                              bool direct) {
  const auto& paths = weights.checkpoint.shard_paths();
  std::vector<DirectFile> files(paths.size());
  for (const auto& layer : weights.layers) {
    if (!layer.is_moe) continue;
    auto& f = files[static_cast<size_t>(layer.moe.expert_shard)];
    if (f.size() > 0) continue;
    DF_ASSIGN_OR_RETURN(f, DirectFile::Open(paths[static_cast<size_t>(layer.moe.expert_shard)],
                                            direct ? ReadMode::kDirect : ReadMode::kBuffered));
  }
  return std::unique_ptr<ExpertSpanReader>(new ShardSpanReader(std::move(files)));
}

uint64_t ExpertStreamer::SlotBytes(const ModelConfig& c) {
  return DirectFile::BufferBytesFor(c.ExpertBytes());
}

ExpertStreamer::ExpertStreamer(const ModelWeights& weights, const ExpertStreamOptions& options,
                               std::unique_ptr<ExpertSpanReader> reader)
    : w_(weights),
      layout_(weights.expert_layout),
      num_experts_(weights.config.num_experts),
      options_(options),
      reader_(std::move(reader)) {}

Result<std::unique_ptr<ExpertStreamer>> ExpertStreamer::Create(
    const ModelWeights& weights, const ExpertStreamOptions& options,
    std::unique_ptr<ExpertSpanReader> reader, IoScheduler* scheduler) {
  const ModelConfig& c = weights.config;
  if (options.io_threads < 1 || options.io_threads > kMaxIoThreads) {
    return Status::Error("io threads must be in [1, " + std::to_string(kMaxIoThreads) + "]");
  }
  const uint64_t min_bytes = MinCacheBytes(c, options.io_threads);
  if (options.cache_bytes < min_bytes) {
    return Status::Error("expert cache of " + std::to_string(options.cache_bytes) +
                         " bytes is below the minimum of " + std::to_string(min_bytes) + " (" +
                         std::to_string(MinSlots(c, options.io_threads)) + " experts of " +
                         std::to_string(SlotBytes(c)) + " bytes for top-" +
                         std::to_string(c.num_experts_per_token) + " routing and " +
                         std::to_string(options.io_threads) + " I/O threads)");
  }
  const int drives = reader->Drives();
  if (scheduler != nullptr && scheduler->lanes() < drives) {
    return Status::Error("internal: the I/O scheduler has " + std::to_string(scheduler->lanes()) +
                         " lanes for " + std::to_string(drives) + " drives");
  }
  std::unique_ptr<ExpertStreamer> s(new ExpertStreamer(weights, options, std::move(reader)));
  const auto keys = static_cast<size_t>(c.num_hidden_layers * c.num_experts);
  s->location_shard_.assign(keys, -1);
  s->location_offset_.assign(keys, 0);
  s->disk_bytes_.assign(keys, 0);
  s->slot_of_.assign(keys, -1);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& lw = weights.layers[static_cast<size_t>(l)];
    if (!lw.is_moe) continue;
    for (int64_t e = 0; e < c.num_experts; ++e) {
      const auto key = static_cast<size_t>(l * c.num_experts + e);
      s->location_shard_[key] = lw.moe.expert_shard;
      s->location_offset_[key] = lw.moe.expert_offsets[static_cast<size_t>(e)];
      s->disk_bytes_[key] =
          s->reader_->DiskBytes(lw.moe.expert_shard, s->location_offset_[key], s->layout_.bytes);
    }
  }
  const uint64_t slot_bytes = SlotBytes(c);
  const uint64_t n_slots = options.cache_bytes / slot_bytes;
  // 2 MiB alignment lets the kernel back the arena with huge pages, which makes pinning pages
  // for each direct read cheaper; touching it now keeps page faults out of the decode loop.
  const size_t arena_bytes = static_cast<size_t>((n_slots * slot_bytes + kArenaAlignment - 1) /
                                                 kArenaAlignment * kArenaAlignment);
  s->arena_ = static_cast<uint8_t*>(std::aligned_alloc(kArenaAlignment, arena_bytes));
  if (s->arena_ == nullptr) {
    return Status::Error("cannot allocate the expert cache (" + std::to_string(arena_bytes) +
                         " bytes)");
  }
#if defined(MADV_HUGEPAGE)
  ::madvise(s->arena_, arena_bytes, MADV_HUGEPAGE);
#endif
  std::memset(s->arena_, 0, arena_bytes);
  s->slots_.resize(n_slots);
  s->free_.reserve(n_slots);
  s->demand_q_.reserve(n_slots);
  s->prefetch_q_.reserve(n_slots);
  s->current_.reserve(n_slots);
  s->consumed_.reserve(n_slots);
  for (uint64_t i = 0; i < n_slots; ++i) {
    s->slots_[i].buffer = s->arena_ + i * slot_bytes;
    s->free_.push_back(static_cast<int32_t>(n_slots - 1 - i));
  }
  s->io_.Attach(s.get(), scheduler, options.io_threads, drives);
  return s;
}

ExpertStreamer::~ExpertStreamer() {
  io_.Detach();  // no scheduler thread is inside Take or Run after this, so the slots can go
  std::free(arena_);
}

void ExpertStreamer::LruUnlinkLocked(int32_t s) {
  Slot& x = slots_[static_cast<size_t>(s)];
  if (x.lru_prev >= 0) slots_[static_cast<size_t>(x.lru_prev)].lru_next = x.lru_next;
  if (x.lru_next >= 0) slots_[static_cast<size_t>(x.lru_next)].lru_prev = x.lru_prev;
  if (lru_head_ == s) lru_head_ = x.lru_next;
  if (lru_tail_ == s) lru_tail_ = x.lru_prev;
  x.lru_prev = x.lru_next = -1;
}

void ExpertStreamer::LruPushLocked(int32_t s) {
  Slot& x = slots_[static_cast<size_t>(s)];
  x.lru_prev = lru_tail_;
  x.lru_next = -1;
  if (lru_tail_ >= 0) slots_[static_cast<size_t>(lru_tail_)].lru_next = s;
  lru_tail_ = s;
  if (lru_head_ < 0) lru_head_ = s;
}

void ExpertStreamer::DropLocked(int32_t s) {
  Slot& x = slots_[static_cast<size_t>(s)];
  if (x.key >= 0) slot_of_[static_cast<size_t>(x.key)] = -1;
  x.key = -1;
  x.state = SlotState::kFree;
  x.data = nullptr;
  x.pinned = false;
  x.prefetched = false;
  x.error.clear();
  free_.push_back(s);
}

int32_t ExpertStreamer::TakeSlotLocked(bool for_prefetch) {
  if (!free_.empty()) {
    const int32_t s = free_.back();
    free_.pop_back();
    return s;
  }
  // Evict the least recently used unpinned slot. A guess may not evict a loaded guess that has
  // not been used yet (that would only trade one guess for another).
  for (int32_t s = lru_head_; s >= 0; s = slots_[static_cast<size_t>(s)].lru_next) {
    Slot& x = slots_[static_cast<size_t>(s)];
    if (for_prefetch && x.prefetched) continue;
    if (x.prefetched) io_stats_->prefetch_wasted += 1;
    LruUnlinkLocked(s);
    if (x.key >= 0) slot_of_[static_cast<size_t>(x.key)] = -1;
    x.key = -1;
    x.state = SlotState::kFree;
    x.data = nullptr;
    x.prefetched = false;
    x.error.clear();
    return s;
  }
  return -1;
}

void ExpertStreamer::QueueReadLocked(int32_t s, int32_t key, std::vector<int32_t>* queue,
                                     SessionStats* stats) {
  Slot& x = slots_[static_cast<size_t>(s)];
  x.key = key;
  x.state = SlotState::kQueued;
  slot_of_[static_cast<size_t>(key)] = s;
  queue->push_back(s);
  stats->expert_bytes_read += disk_bytes_[static_cast<size_t>(key)];
}

void ExpertStreamer::CancelStaleGuessesLocked(int64_t layer, SessionStats* stats) {
  // Queued guesses for this layer or earlier ones that the layer did not pin will never be used.
  size_t kept = 0;
  for (int32_t s : prefetch_q_) {
    Slot& x = slots_[static_cast<size_t>(s)];
    if (x.key / num_experts_ <= layer && !x.pinned) {
      stats->prefetch_wasted += 1;
      stats->expert_bytes_read -= disk_bytes_[static_cast<size_t>(x.key)];
      DropLocked(s);
    } else {
      prefetch_q_[kept++] = s;
    }
  }
  prefetch_q_.resize(kept);
}

Status ExpertStreamer::Begin(int64_t layer, std::span<const int32_t> experts, SessionStats* stats) {
  std::unique_lock<std::mutex> lock(mu_);
  DF_CHECK(static_cast<int64_t>(experts.size()) <= max_batch(), "%zu experts", experts.size());
  io_stats_ = stats;
  current_.clear();
  consumed_.assign(experts.size(), 0);
  bool queued = false;
  for (const int32_t e : experts) {
    const auto key = static_cast<int32_t>(layer * num_experts_ + e);
    int32_t s = slot_of_[static_cast<size_t>(key)];
    stats->expert_loads += 1;
    const bool cached = s >= 0 && slots_[static_cast<size_t>(s)].state == SlotState::kReady &&
                        !slots_[static_cast<size_t>(s)].prefetched;
    if (!cached) stats->expert_bytes_needed += disk_bytes_[static_cast<size_t>(key)];
    if (s >= 0 && slots_[static_cast<size_t>(s)].state == SlotState::kFailed) {
      LruUnlinkLocked(s);  // a failed guess: read it again as a demand read
      DropLocked(s);
      free_.pop_back();
      QueueReadLocked(s, key, &demand_q_, stats);
      queued = true;
    } else if (s >= 0) {
      Slot& x = slots_[static_cast<size_t>(s)];
      // A guess that is loaded or loading is a prefetch hit; one not started yet is not.
      if (x.prefetched && x.state != SlotState::kQueued) stats->prefetch_hits += 1;
      if (x.state == SlotState::kReady) {
        stats->expert_cache_hits += 1;
      } else if (x.state == SlotState::kQueued) {
        // A queued guess becomes a demand read at the front.
        auto it = std::find(prefetch_q_.begin(), prefetch_q_.end(), s);
        if (it != prefetch_q_.end()) {
          prefetch_q_.erase(it);
          demand_q_.push_back(s);
          queued = true;
        }
      }
      if (x.state == SlotState::kReady) LruUnlinkLocked(s);
      x.prefetched = false;
    } else {
      // Slots outside this Begin are unpinned and not waiting to be read (End cancels a cut-short
      // layer's reads that had not started), and guesses hold at most a quarter of them plus one
      // per I/O thread, so one is found (max_batch()).
      s = TakeSlotLocked(false);
      DF_CHECK(s >= 0, "no expert slot free");
      QueueReadLocked(s, key, &demand_q_, stats);
      queued = true;
    }
    slots_[static_cast<size_t>(s)].pinned = true;
    current_.push_back(s);
  }
  CancelStaleGuessesLocked(layer, stats);
  lock.unlock();
  if (queued) io_.Notify();
  return Status::Ok();
}

Result<ExpertSource::Ready> ExpertStreamer::WaitAny(SessionStats* stats) {
  std::unique_lock<std::mutex> lock(mu_);
  std::chrono::steady_clock::time_point start;
  bool waited = false;
  for (;;) {
    bool pending = false;
    for (size_t j = 0; j < current_.size(); ++j) {
      if (consumed_[j]) continue;
      pending = true;
      const Slot& x = slots_[static_cast<size_t>(current_[j])];
      if (x.state == SlotState::kReady || x.state == SlotState::kFailed) {
        consumed_[j] = 1;
        if (waited) {
          stats->io_wait_seconds +=
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        }
        if (x.state == SlotState::kFailed) return Status::Error(x.error);
        return Ready{static_cast<int64_t>(j), x.data};
      }
    }
    DF_CHECK(pending, "WaitAny called after every expert was returned");
    if (!waited) {
      waited = true;
      start = std::chrono::steady_clock::now();
    }
    done_cv_.wait(lock);
  }
}

void ExpertStreamer::End() {
  std::lock_guard<std::mutex> lock(mu_);
  for (const int32_t s : current_) {
    Slot& x = slots_[static_cast<size_t>(s)];
    x.pinned = false;
    if (x.state == SlotState::kQueued) {
      // A layer cut short (an error, an interrupt): its demand reads not started yet are
      // cancelled, so the next layer finds their slots free (Begin counts on it).
      const auto queued = std::find(demand_q_.begin(), demand_q_.end(), s);
      if (queued != demand_q_.end()) {
        demand_q_.erase(queued);
        io_stats_->expert_bytes_read -= disk_bytes_[static_cast<size_t>(x.key)];
        DropLocked(s);
      }
    } else if (x.state == SlotState::kFailed) {
      DropLocked(s);  // read again next time
    } else if (x.state == SlotState::kReady) {
      LruPushLocked(s);
    }  // still reading (an error cut the layer short): joins the LRU list when the read ends
  }
  current_.clear();
}

void ExpertStreamer::Prefetch(int64_t layer, std::span<const int32_t> experts,
                              SessionStats* stats) {
  std::unique_lock<std::mutex> lock(mu_);
  io_stats_ = stats;
  bool queued = false;
  const size_t max_queued = slots_.size() / 4;
  for (const int32_t e : experts) {
    if (prefetch_q_.size() >= max_queued) break;
    const auto key = static_cast<int32_t>(layer * num_experts_ + e);
    if (slot_of_[static_cast<size_t>(key)] >= 0) continue;
    const int32_t s = TakeSlotLocked(true);
    if (s < 0) break;
    QueueReadLocked(s, key, &prefetch_q_, stats);
    slots_[static_cast<size_t>(s)].prefetched = true;
    stats->prefetch_issued += 1;
    queued = true;
  }
  lock.unlock();
  if (queued) io_.Notify();
}

bool ExpertStreamer::Take(IoPriority priority, int64_t* ticket) {
  int lane = 0;
  return TakeOnLane(priority, 1u, ticket, &lane);
}

bool ExpertStreamer::TakeOnLane(IoPriority priority, uint32_t free_lanes, int64_t* ticket,
                                int* lane) {
  if (priority == IoPriority::kSpine) return false;
  std::lock_guard<std::mutex> lock(mu_);
  const bool guess = priority == IoPriority::kExpertGuess;
  // The slots allow for io_threads guesses in flight besides the queued ones (MinSlots).
  if (guess && guesses_reading_ >= options_.io_threads) return false;
  std::vector<int32_t>& q = guess ? prefetch_q_ : demand_q_;
  // The oldest read whose bytes are on a drive with room: one waiting for a full drive does not
  // hold up those behind it that go elsewhere.
  for (size_t i = 0; i < q.size(); ++i) {
    const int32_t s = q[i];
    Slot& x = slots_[static_cast<size_t>(s)];
    const auto key = static_cast<size_t>(x.key);
    const int drive =
        reader_->Choose(location_shard_[key], location_offset_[key], layout_.bytes, free_lanes);
    if (drive < 0) continue;
    q.erase(q.begin() + static_cast<std::ptrdiff_t>(i));
    x.state = SlotState::kReading;
    x.drive = drive;
    if (guess) {
      x.guess_reading = true;
      ++guesses_reading_;
    }
    *ticket = s;
    *lane = drive;
    return true;
  }
  return false;
}

void ExpertStreamer::Run(int64_t ticket) {
  const auto s = static_cast<int32_t>(ticket);
  Slot& x = slots_[static_cast<size_t>(s)];
  const int32_t key = x.key;  // fixed while the slot is kReading
  const int shard = location_shard_[static_cast<size_t>(key)];
  const uint64_t offset = location_offset_[static_cast<size_t>(key)];
  auto data = reader_->ReadOn(x.drive, shard, offset, layout_.bytes, x.buffer,
                              static_cast<size_t>(SlotBytes(w_.config)));
  Status status = data.ok() ? Status::Ok() : data.status();
  const int64_t layer = key / num_experts_, expert = key % num_experts_;
  if (status.ok() && options_.verify_scales) {
    status = AuditExpertScales(w_.config, layout_, *data, layer, expert);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (x.guess_reading) {
    x.guess_reading = false;
    --guesses_reading_;
  }
  if (status.ok()) {
    x.data = *data;
    x.state = SlotState::kReady;
  } else {
    x.error = "layer " + std::to_string(layer) + " expert " + std::to_string(expert) + " (" +
              reader_->ShardPath(shard) + ", offset " + std::to_string(offset) + ", " +
              std::to_string(layout_.bytes) + " bytes): " + status.message();
    x.state = SlotState::kFailed;
  }
  if (!x.pinned) LruPushLocked(s);  // a guess, or a demand read whose layer gave up
  done_cv_.notify_all();
}

}  // namespace deltafin
