// SpineRing: a spine larger than its RAM share, read ahead of use with direct I/O into the
// engine's own buffers (docs/STREAMING.md).
//
// The spine's matrices form groups: one per decoder layer (attention, shared experts, router,
// latent projections) and the lm_head. The memory plan pins some groups: they are read once at
// construction into buffers of their own. The other groups stream through a ring of `depth`
// slots, each as large as the largest streamed group: when the forward pass asks for group g,
// the reads of the next depth-1 streamed groups (in the pass's cyclic order, the next token's
// first layers after the lm_head) are already queued behind g's, so the disk stays busy while g
// computes. Reads bypass the page cache (O_DIRECT / F_NOCACHE, io/direct_file.h): a cyclic scan
// larger than the cache evicts every page just before it is needed again, and each page read
// through the cache under a memory limit also pays for a reclaim.
//
// Where each matrix is on disk comes from the byte map (ModelWeights::spine_map, spine_map.h):
// its file, offset and bytes, the shard's or the row-int8 file's. A group's matrices are read as
// few extents as the shard layout allows: matrices adjacent in
// one file (gaps up to kMaxGap, read along) become one extent, cut into chunks of kChunkBytes
// that the engine's IoScheduler (weights/io_scheduler.h) reads in queue order, after the current
// layer's expert misses and before the router lookahead's guesses. Slot layout, per group:
//   slot: [extent 0 (4 KiB-aligned file range) | extent 1 | ... | slack]
//   matrix pointer = slot + extent's slot offset + (matrix file offset - extent file begin)
// so a matrix keeps its file offset's alignment modulo 4 KiB, as it had when mapped.
//
// The model computes on LayerWeights it is handed (layer()): a copy of each decoder layer made
// at construction whose matrix pointers are re-aimed at the slot holding it, and whose small
// mapped vectors (conv taps, dt_bias, output norm, correction bias) are copied into RAM, so
// decode takes no page faults on the spine. Results are bit-identical to the mapped spine: the
// bytes are the checkpoint's (or the .i8 files') exactly. Acquire() does not allocate.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/status.h"
#include "io/direct_file.h"
#include "weights/io_scheduler.h"
#include "weights/spine_source.h"
#include "weights/weights.h"

namespace deltafin {

struct SpineRingOptions {
  int depth = 2;    // ring slots: the group in use plus depth-1 read ahead (1: no read-ahead)
  int readers = 4;  // threads reading the pinned groups at load, and the ring's own scheduler's
  ReadMode read_mode = ReadMode::kDirect;
  // [layers + 1] groups to read once and keep (layers, then the lm_head); empty: none.
  std::vector<bool> pinned;
};

class SpineRing final : public SpineSource, private IoQueue {
 public:
  static constexpr uint64_t kChunkBytes = uint64_t{1} << 20;
  static constexpr uint64_t kMaxGap = uint64_t{256} << 10;

  // Opens the files, plans every group's extents and reads the pinned groups (options.readers
  // threads); fails naming the layer, tensor, file and offset on any read error. Streamed reads
  // then run on `scheduler` (not owned; it must outlive the ring) or, when null, on a scheduler
  // of options.readers threads of the ring's own.
  static Result<std::unique_ptr<SpineRing>> Create(const ModelWeights& weights,
                                                   const SpineRingOptions& options,
                                                   IoScheduler* scheduler = nullptr);
  ~SpineRing() override;
  SpineRing(const SpineRing&) = delete;
  SpineRing& operator=(const SpineRing&) = delete;

  // Groups 0..layers-1 are the decoder layers, tail_group() the lm_head.
  int64_t tail_group() const override { return static_cast<int64_t>(groups_.size()) - 1; }
  // Waits until group g is in RAM (reading it first when the pass asked out of the predicted
  // order) and queues the reads of the streamed groups that follow it. `bytes_read`: bytes this
  // call's group cost the disk, the first time it is acquired after being read. Until the next
  // Acquire, layer(g) / lm_head() of this group stay valid. An I/O error names the layer, tensor,
  // file and offset; the failed group is read again on the next call.
  Status Acquire(int64_t group, uint64_t* bytes_read) override;
  // The layer as the model should see it; valid for the group acquired last and for pinned ones.
  const LayerWeights& layer(int64_t i) const override { return layers_[static_cast<size_t>(i)]; }
  const SpineMatrix& lm_head() const override { return lm_head_; }
  // The embedding table stays mapped, not held in RAM, when the spine streams: a wave's rows would
  // each cost a page fault that reads in turn. Their readahead is started here, all at once.
  void WillReadEmbeddingRows(std::span<const int32_t> tokens) override;
  // Layer i when it is already in RAM (pinned, or read and acquired-ready), else null. Does not
  // wait: the post-attention router lookahead uses it to guess only when it costs no wait.
  const LayerWeights* ReadyLayer(int64_t i) override;

  int depth() const { return static_cast<int>(slots_.size()); }
  uint64_t slot_bytes() const { return slot_bytes_; }
  uint64_t pinned_bytes() const { return pinned_bytes_; }
  uint64_t streamed_bytes_per_pass() const { return streamed_bytes_; }
  ReadMode read_mode() const { return read_mode_; }
  // One line for the startup log: pinned groups and bytes, streamed bytes, depth.
  std::string Describe() const;

  // The reads of one pass over the streamed groups, in pass order, as the ring issues them; for a
  // disk probe with decode's access pattern (weights/read_probe.h). ReadForProbe reads one into
  // the caller's buffer (capacity bytes, aligned for direct I/O), never into a slot.
  struct StreamedRead {
    int64_t group = 0;
    int file = 0;
    uint64_t offset = 0, bytes = 0;
  };
  std::vector<StreamedRead> StreamedReads() const;
  Status ReadForProbe(const StreamedRead& read, uint8_t* buffer, size_t capacity) const;

 private:
  struct MatrixRef {  // one matrix of a group, where it is on disk and which pointer it feeds
    int file = 0;
    uint64_t offset = 0, bytes = 0;
    SpineMatrix* matrix = nullptr;  // in layers_ / lm_head_: the pointer to re-aim
    bool int8 = false;              // re-aim q (the row-int8 copy) instead of data
    std::string name;               // e.g. "layer 3 kda.q_proj"
  };
  struct Extent {
    int file = 0;
    uint64_t begin = 0, end = 0;  // file range, begin 4 KiB-aligned
    uint64_t slot_offset = 0;     // where it lands in the slot
  };
  struct Chunk {
    int file = 0;
    uint64_t offset = 0, bytes = 0, slot_offset = 0;
    const std::string* tensor = nullptr;  // the first matrix it covers (error messages)
  };
  struct Group {
    std::vector<MatrixRef> matrices;
    std::vector<Extent> extents;
    std::vector<Chunk> chunks;
    uint64_t bytes = 0;  // extents' total: what reading the group costs
    bool pinned = false;
    AlignedBuffer<uint8_t> pinned_buffer;
    uint8_t* pinned_base = nullptr;  // 4 KiB-aligned start inside pinned_buffer
  };
  struct Slot {
    int64_t group = -1;
    int remaining = 0;  // chunks not read yet
    bool counted = false;
    bool failed = false;
    std::string error;  // the first failure, reserved so recording it rarely allocates
    AlignedBuffer<uint8_t> buffer;
    uint8_t* base = nullptr;  // 4 KiB-aligned start inside buffer
    size_t capacity = 0;      // bytes from base to the end of buffer
  };
  struct Task {
    int slot = 0;
    int chunk = 0;
  };

  struct PinnedRead {  // one chunk of a pinned group, read at construction
    Group* group = nullptr;
    size_t chunk = 0;
    size_t room = 0;  // bytes of the group's buffer from the chunk's place on
  };

  SpineRing() = default;
  Status Plan(const ModelWeights& w, const SpineRingOptions& o);
  Status ReadPinned(const std::vector<PinnedRead>& reads, int readers);
  void AimGroup(const Group& g, const uint8_t* base);
  void Queue(int64_t group, int slot);  // mutex_ held
  int SlotOf(int64_t group) const;      // mutex_ held; -1 when none
  int64_t NextStreamed(int64_t group) const;
  bool Take(IoPriority priority, int64_t* ticket) override;  // IoQueue
  void Run(int64_t ticket) override;

  std::vector<DirectFile> files_;
  std::vector<Group> groups_;
  std::vector<LayerWeights> layers_;
  std::vector<AlignedBuffer<float>> small_copies_;  // the mapped small vectors, copied
  SpineMatrix lm_head_;
  const uint16_t* embed_tokens_ = nullptr;  // [vocab, H] BF16, mapped
  size_t embed_row_bytes_ = 0;
  std::vector<int64_t> streamed_;      // streamed groups in pass order
  std::vector<int64_t> stream_index_;  // [groups] index in streamed_, -1 when pinned
  uint64_t slot_bytes_ = 0, pinned_bytes_ = 0, streamed_bytes_ = 0;
  ReadMode read_mode_ = ReadMode::kDirect;

  std::mutex mutex_;
  std::condition_variable done_;  // Acquire: a slot's chunks all finished
  std::vector<Slot> slots_;
  std::vector<Task> tasks_;  // ring buffer of queued chunk reads (reserved: depth × chunks)
  size_t task_head_ = 0, task_count_ = 0;
  IoSchedulerLink io_;
};

}  // namespace deltafin
