// DriveSetReader: the ExpertSpanReader of a model spread over several drives (issue 35;
// docs/STREAMING.md "Several drives"). Each expert read goes to one of the expert's verified copies
// (weights/placement.h), the one expected to finish first:
//
//   cost(d) = (bytes in flight on drive d + this read's bytes) / bandwidth(d)
//
// bandwidth(d) is learned from the drive's own completed reads: bytes delivered over the time the
// drive had at least one read in flight (its busy time), folded into an exponentially weighted
// average every 0.25 s of busy time, so a drive twice as fast ends up with about twice the bytes
// in flight and a slow or busy drive is used in proportion to what it delivers. All drives start
// at the same assumed rate; the first few reads correct it. A drive whose reads in flight have not
// moved for over 0.25 s (a stall) is expected to take at least as long again, so reads with
// another copy stop waiting for it. The reads run on the engine's
// IoScheduler, where each drive is a lane with its own queue depth (--io-threads reads in flight
// per drive): the streamer asks Choose for a drive among those with room when it hands a read to
// a thread, so reads whose copies are on a stalled drive wait without holding up reads that can
// go to another drive. A read whose cheapest copy is on a full drive waits for that drive too:
// sending it to a slower drive with room would finish it later and split the bytes closer to
// 1 : 1 than the drives' speeds (1.6 : 1 at 2 : 1 speeds, docs/PERFORMANCE.md).
//
// A drive that fails a read is marked bad for the rest of the run (one warning) and the expert is
// read from another copy; with none left the read fails with an error naming the drive, the file
// and the offset. Copies are byte-identical (spread verified their hashes), so which drive answers
// never changes a result. Read() does not allocate unless it fails.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "deltafin/engine.h"
#include "io/direct_file.h"
#include "weights/expert_streamer.h"
#include "weights/placement.h"
#include "weights/weights.h"

namespace deltafin {

class DriveSetReader final : public ExpertSpanReader {
 public:
  // Opens every drive file that holds a copy. A drive folder or file that is missing or
  // unreadable is skipped with a warning when every expert it holds has another copy, else an
  // error naming it.
  static Result<std::unique_ptr<DriveSetReader>> Open(const ModelWeights& weights,
                                                      const std::string& model_dir,
                                                      const Placement& placement, bool direct);

  // Choose among every drive, then ReadOn (tools and probes that read outside the scheduler).
  Result<const uint8_t*> Read(int shard, uint64_t offset, uint64_t length, uint8_t* buffer,
                              size_t capacity) override;
  int Drives() const override { return static_cast<int>(drives_.size()); }
  // The drive in `free_drives` of the copy expected to finish first, counted in flight there; -1
  // (wait) when a full drive would finish it sooner still, even if a slower drive has room (the
  // read starts when the faster drive's lane frees, and ends sooner), or when every good drive
  // holding a copy is full. Ties go to a drive with room. With no good copy left it returns a
  // drive holding one anyway, so ReadOn reports the failure, but only one in `free_drives` (-1
  // while those are all full: the scheduler counts the read on the lane it returns).
  int Choose(int shard, uint64_t offset, uint64_t length, uint32_t free_drives) override;
  // Reads from `drive` (chosen by Choose); if that drive fails or failed meanwhile, from another
  // copy at once, whatever its queue depth.
  Result<const uint8_t*> ReadOn(int drive, int shard, uint64_t offset, uint64_t length,
                                uint8_t* buffer, size_t capacity) override;
  std::string ShardPath(int shard) const override {
    return shard_paths_[static_cast<size_t>(shard)];
  }
  uint64_t DiskBytes(int shard, uint64_t offset, uint64_t length) const override;
  const char* ModeName() const override;

  // Per drive (0: the model folder): bytes and reads served, busy time, since Open.
  std::vector<DriveStats> Stats() const;

 private:
  struct Drive {
    std::string path;
    std::vector<DirectFile> files;  // [shard], unopened where the drive holds none of its experts
    bool bad = false;
    std::string error;  // why it went bad
    int inflight = 0;
    uint64_t inflight_bytes = 0;
    uint64_t bytes_read = 0, reads = 0;
    std::chrono::steady_clock::time_point busy_since;
    std::chrono::steady_clock::time_point last_done;  // a read of it last ended (or failed)
    double busy_seconds = 0;                          // closed busy intervals
    double bandwidth = 0;                             // bytes/s estimate
    uint64_t window_bytes = 0;
    double window_start_busy = 0;  // busy_seconds at the start of the estimate's window
  };
  DriveSetReader() = default;
  int32_t Key(int shard, uint64_t offset) const;  // layer * E + expert, -1 if unknown
  double BusyNowLocked(const Drive& d, std::chrono::steady_clock::time_point now) const;
  // The good drive holding a copy of `key` (of `bytes`) expected to finish first among `allowed`;
  // -1 if none. `now` dates a stall (drives with reads in flight and none finished lately).
  // *cost (if not null): its expected seconds to finish.
  int BestLocked(int32_t key, uint64_t bytes, uint32_t allowed,
                 std::chrono::steady_clock::time_point now, double* cost = nullptr) const;
  void ReserveLocked(Drive& d, uint64_t bytes);  // one more read in flight on d
  void ReleaseLocked(Drive& d, uint64_t bytes);

  std::vector<std::string> shard_paths_;            // the model folder's shard files
  std::vector<std::pair<uint64_t, int32_t>> keys_;  // (shard << 40 | offset, key), sorted
  std::vector<uint32_t> copies_;  // [key] drive bits (placement, bits of bad drives kept)
  std::vector<Drive> drives_;
  bool buffered_ = false;  // some file fell back to buffered reads (tmpfs)
  std::chrono::steady_clock::time_point opened_;
  mutable std::mutex mu_;
};

// The expert reader of a model: a DriveSetReader when `model_dir` has a placement file (refused
// with the reason when it belongs to another model), else the model folder's shards
// (OpenShardSpanReader). *drives, when not null, is set to the drive set (null without one); it
// lives as long as the returned reader.
Result<std::unique_ptr<ExpertSpanReader>> OpenExpertReader(const ModelWeights& weights,
                                                           const std::string& model_dir,
                                                           bool direct,
                                                           DriveSetReader** drives = nullptr);

}  // namespace deltafin
