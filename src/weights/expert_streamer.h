// ExpertStreamer: routed experts read from disk on demand into a byte-budgeted RAM cache, with
// best-effort prefetch (docs/STREAMING.md, issue "expert streaming"). Its reads run on the engine's
// IoScheduler (weights/io_scheduler.h): demand reads at the highest priority, guesses at the
// lowest, with a streamed spine's reads between them.
//
// The cache is a fixed set of slots, each an aligned buffer that holds one expert span (the six
// contiguous tensors, docs/MODEL.md §2.8) read with one positional read. The scheduler's threads
// drain two queues: demand reads (experts a layer needs now) before prefetch reads (guesses). The
// forward pass, for each MoE layer:
//   Begin(layer, experts)  hits stay, misses are queued (queued guesses for them are promoted,
//                          stale guesses for this layer are cancelled); all are pinned
//   Prefetch(layer+1, ...) guesses for the next layer, queued behind the demand reads
//   WaitAny()              the next expert in RAM, whichever read finished first, and its bytes
//   End()                  unpins; the slots join the LRU list
// Slots never move while pinned, and kernels read them in place. Nothing here changes which
// experts are used or how they are combined, so results are bit-identical to mapped experts.
//
// Errors (a short read, an I/O error, scale bytes outside [2, 252]) fail the WaitAny of the expert
// with a message naming the layer, expert, file and offset; the slot is dropped so a later call
// reads it again.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "deltafin/engine.h"
#include "weights/expert_source.h"
#include "weights/io_scheduler.h"
#include "weights/weights.h"

namespace deltafin {

// Reads one expert span of one shard into an aligned buffer. The production reader is
// ShardSpanReader (DirectFile per shard); tests substitute readers that fail.
class ExpertSpanReader {
 public:
  virtual ~ExpertSpanReader() = default;
  // Returns the address of the first span byte inside `buffer` (see DirectFile::ReadSpan).
  virtual Result<const uint8_t*> Read(int shard, uint64_t offset, uint64_t length, uint8_t* buffer,
                                      size_t capacity) = 0;
  // The drives reads go to (one unless the model is spread, weights/drive_set.h); each is a lane
  // of the IoScheduler with its own queue depth.
  virtual int Drives() const { return 1; }
  // Chooses the drive of a read among `free_drives` (bit d: drive d may take another read) and
  // counts the read as in flight there until ReadOn ends; -1 when the read should wait (no drive
  // holding the bytes has room, or the one expected to finish it first is full). Called with the
  // streamer's mutex held; must not block on a read.
  virtual int Choose(int /*shard*/, uint64_t /*offset*/, uint64_t /*length*/,
                     uint32_t free_drives) {
    return (free_drives & 1u) != 0 ? 0 : -1;
  }
  // Read() on the drive Choose returned (another copy's drive if that one fails).
  virtual Result<const uint8_t*> ReadOn(int /*drive*/, int shard, uint64_t offset, uint64_t length,
                                        uint8_t* buffer, size_t capacity) {
    return Read(shard, offset, length, buffer, capacity);
  }
  virtual std::string ShardPath(int shard) const = 0;
  // Bytes the device transfers for such a read (direct reads cover whole aligned blocks).
  virtual uint64_t DiskBytes(int shard, uint64_t offset, uint64_t length) const = 0;
  virtual const char* ModeName() const = 0;
};

// Opens every shard that holds experts with DirectFile (O_DIRECT unless `direct` is false).
Result<std::unique_ptr<ExpertSpanReader>> OpenShardSpanReader(const ModelWeights& weights,
                                                              bool direct);

struct ExpertStreamOptions {
  uint64_t cache_bytes = 0;   // RAM for slots; at least MinCacheBytes()
  int io_threads = 8;         // concurrent reads per drive (each drive's queue depth)
  bool verify_scales = true;  // check every scale byte of every expert read lies in [2, 252]
};

class ExpertStreamer final : public ExpertSource, private IoQueue {
 public:
  static constexpr int kMaxIoThreads = 64;
  // Slots a decode step needs at least: one layer's experts pinned, plus room for guesses (a
  // quarter of the slots) and one read in flight per I/O thread.
  static int64_t MinSlots(const ModelConfig& c, int io_threads) {
    return ((c.num_experts_per_token + io_threads) * 4 + 2) / 3 + 1;
  }
  static uint64_t SlotBytes(const ModelConfig& c);
  static uint64_t MinCacheBytes(const ModelConfig& c, int io_threads) {
    return static_cast<uint64_t>(MinSlots(c, io_threads)) * SlotBytes(c);
  }

  // Reads run on `scheduler` (not owned; it must outlive the streamer; a lane for each of the
  // reader's drives) or, when null, on a scheduler of the streamer's own with options.io_threads
  // reads in flight on each of the reader's drives. Guesses in flight stay at most io_threads in
  // all (the slot count allows for that many, MinSlots).
  static Result<std::unique_ptr<ExpertStreamer>> Create(const ModelWeights& weights,
                                                        const ExpertStreamOptions& options,
                                                        std::unique_ptr<ExpertSpanReader> reader,
                                                        IoScheduler* scheduler = nullptr);
  ~ExpertStreamer() override;
  ExpertStreamer(const ExpertStreamer&) = delete;
  ExpertStreamer& operator=(const ExpertStreamer&) = delete;

  int64_t num_slots() const { return static_cast<int64_t>(slots_.size()); }
  // Most experts one Begin may pin (the rest of the slots stay for prefetch).
  int64_t max_batch() const override { return num_slots() - num_slots() / 4 - options_.io_threads; }
  const char* read_mode() const { return reader_->ModeName(); }

  // Pins experts[0..m) of `layer` (m <= max_batch(), distinct), queueing reads for misses.
  Status Begin(int64_t layer, std::span<const int32_t> experts, SessionStats* stats) override;
  // An expert of the current Begin: its position in the Begin list and its span.
  // Blocks until some expert of the current Begin that no WaitAny returned yet is in RAM (the
  // lowest index among those ready) and returns it. Lets the caller compute cached experts
  // while the misses load. An expert whose read failed is returned as that error.
  Result<Ready> WaitAny(SessionStats* stats) override;
  // Unpins the current Begin's experts.
  void End() override;
  // Queues reads of the guessed experts of `layer` that are neither cached nor queued, as far as
  // unpinned slots allow without evicting anything pinned or queued.
  bool takes_guesses() const override { return true; }
  void Prefetch(int64_t layer, std::span<const int32_t> experts, SessionStats* stats) override;

 private:
  enum class SlotState : uint8_t { kFree, kQueued, kReading, kReady, kFailed };
  struct Slot {
    uint8_t* buffer = nullptr;
    const uint8_t* data = nullptr;  // first span byte inside buffer once kReady
    int32_t key = -1;               // layer * num_experts + expert, -1 when free
    SlotState state = SlotState::kFree;
    bool pinned = false;
    bool prefetched = false;     // loaded by a guess and not used yet
    bool guess_reading = false;  // taken from the guess queue and still being read
    int drive = 0;               // where the read in flight goes (ExpertSpanReader::Choose)
    int32_t lru_prev = -1, lru_next = -1;
    std::string error;
  };

  ExpertStreamer(const ModelWeights& weights, const ExpertStreamOptions& options,
                 std::unique_ptr<ExpertSpanReader> reader);
  bool Take(IoPriority priority, int64_t* ticket) override;  // IoQueue
  bool TakeOnLane(IoPriority priority, uint32_t free_lanes, int64_t* ticket, int* lane) override;
  void Run(int64_t ticket) override;
  int32_t TakeSlotLocked(bool for_prefetch);  // a free or evicted slot; -1 if none
  void DropLocked(int32_t s);                 // back to the free list
  // Gives slot s to `key` and queues its read on `queue` (demand or prefetch).
  void QueueReadLocked(int32_t s, int32_t key, std::vector<int32_t>* queue, SessionStats* stats);
  void LruUnlinkLocked(int32_t s);
  void LruPushLocked(int32_t s);
  void CancelStaleGuessesLocked(int64_t layer, SessionStats* stats);

  const ModelWeights& w_;
  const ExpertLayout layout_;
  const int64_t num_experts_;
  ExpertStreamOptions options_;
  std::unique_ptr<ExpertSpanReader> reader_;
  std::vector<int32_t> location_shard_;    // [layers * experts]
  std::vector<uint64_t> location_offset_;  // [layers * experts]
  std::vector<uint64_t> disk_bytes_;       // [layers * experts] bytes one read transfers
  uint8_t* arena_ = nullptr;
  std::vector<Slot> slots_;
  std::vector<int32_t> slot_of_;  // [layers * experts] slot index or -1

  std::mutex mu_;
  std::condition_variable done_cv_;  // the forward pass waits for slots
  std::vector<int32_t> free_;        // free slot indices
  std::vector<int32_t> demand_q_, prefetch_q_;
  int guesses_reading_ = 0;                // slots with guess_reading set
  int32_t lru_head_ = -1, lru_tail_ = -1;  // unpinned ready/failed slots, head = oldest
  std::vector<int32_t> current_;           // slots of the current Begin, in order
  std::vector<uint8_t> consumed_;          // [current_.size()] returned by WaitAny
  SessionStats* io_stats_ = nullptr;       // where completed reads are counted
  IoSchedulerLink io_;
};

}  // namespace deltafin
