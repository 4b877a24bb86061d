// Writing routed experts onto drive folders and recording them in the placement file
// (weights/placement.h; issue 35, docs/STREAMING.md "Several drives"). Shared by `deltafin spread`
// (experts copied from an installed model, setup/spread.h) and `deltafin setup --drive` (experts
// placed as they are downloaded, setup/installer.h), so both produce the same drive files and
// record a copy under the same rule:
//
//   a copy is recorded only after its bytes were written, fdatasync'ed, dropped from the page
//   cache and read back to the SHA-256 of the bytes it was made from; the placement file is
//   replaced durably after every batch.
//
// A process killed at any point therefore never records a copy that reads wrong, and running the
// same command again writes only what is not recorded yet. Each drive folder holds files with the
// model's shard names and sizes: the safetensors header, each copied expert at its own offset,
// every other byte a hole.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "setup/shard_layout.h"
#include "weights/placement.h"

namespace deltafin::setup {

// Where an expert's span sits in its shard (the same offset in every copy).
struct ExpertPlace {
  int shard = 0;  // index into the placement model's shard list
  uint64_t offset = 0, bytes = 0;
};

// Drive folders named on the command line, checked and entered into `placement` (drives it
// already lists keep their numbers): each is created if missing, must be a writable folder outside
// the model folder, not named twice, and at most Placement::kMaxDrives in all. A folder on the
// same device as the model folder or an earlier one is accepted with a warning (it adds no read
// bandwidth), appended to *warnings and logged. Returns the drive numbers (1-based) in order.
Result<std::vector<int>> AddDrives(const std::string& model_dir,
                                   const std::vector<std::string>& drives, Placement* placement,
                                   std::vector<std::string>* warnings);

// pread of exactly `bytes` at `offset` (a short read is an error naming `path` and the offset).
Status PreadAll(int fd, uint8_t* buf, uint64_t bytes, uint64_t offset, const std::string& path);

// The copies to make so that every expert in `where` (indexed like placement.copies, nullopt for
// dense layers) is on `copies` of the drives `given` (fewer when fewer drives are given),
// round-robin, each drive keeping `reserve_bytes` plus the shard headers free. Copies already
// recorded count. Returns (key, drive) pairs, or an error naming each drive and its free space
// when they cannot hold that many copies of every expert.
Result<std::vector<std::pair<size_t, int>>> AssignCopies(
    const Placement& placement, const std::vector<std::optional<ExpertPlace>>& where,
    const std::vector<int>& given, int copies, uint64_t header_bytes, uint64_t reserve_bytes);

// Records where[layer * experts + expert] for every routed-expert block of `layout` (shard number
// `shard` of the placement), refusing a block outside config.json's shape (`layers` x `experts`)
// with an error naming `path`. Both `spread` and `setup --drive` index a model's experts this way.
Status RecordExpertPlaces(const ShardLayout& layout, int shard, int64_t layers, int64_t experts,
                          const std::string& path, std::vector<std::optional<ExpertPlace>>* where);

// Bytes a copy of `x` takes on a drive (whole 4 KiB blocks).
uint64_t CopyBlockBytes(const ExpertPlace& x);

// Writes copies into the drive files and records the verified ones (see the file comment). Not
// thread-safe: callers on several threads hold one mutex around it.
class CopyWriter {
 public:
  struct ShardFile {
    std::string name;  // the shard's file name, the same on every drive
    uint64_t size = 0;
    std::vector<uint8_t> header;  // written at offset 0 of each drive file
  };
  // `placement` is the one saved into `model_dir` by Commit; it must outlive the writer.
  CopyWriter(std::string model_dir, Placement* placement, std::vector<ShardFile> shards);
  ~CopyWriter();
  CopyWriter(const CopyWriter&) = delete;
  CopyWriter& operator=(const CopyWriter&) = delete;

  // Writes the bytes of expert `key` (at `x`) to drive `drive`'s shard file. `sha256` is the hash
  // of the bytes the copy is made from; a key whose placement already records another hash is
  // refused (the source changed since).
  Status Write(size_t key, int drive, const ExpertPlace& x, const uint8_t* data,
               const std::string& sha256);
  size_t pending() const { return pending_.size(); }
  uint64_t pending_bytes() const { return pending_bytes_; }
  // Syncs the written files, reads every pending copy back from the device, records those that
  // match and saves the placement (a copy that reads back differently fails the call and nothing
  // of the batch is recorded).
  Status Commit();
  uint64_t copies_made() const { return copies_made_; }
  uint64_t bytes_copied() const { return bytes_copied_; }

 private:
  struct Pending {
    size_t key;
    int drive;
    ExpertPlace at;
  };
  Result<int> File(int drive, int shard);  // the open drive file, created and sized on first use
  std::string FilePath(int drive, int shard) const;

  std::string model_dir_;
  Placement* p_;
  std::vector<ShardFile> shards_;
  std::map<std::pair<int, int>, int> files_;  // (drive, shard) -> fd
  std::vector<Pending> pending_;
  uint64_t pending_bytes_ = 0;
  uint64_t copies_made_ = 0, bytes_copied_ = 0;
  std::vector<uint8_t> back_;
};

// Experts copied between two placement saves: bounds the work a kill -9 loses.
inline constexpr size_t kCopyBatchExperts = 64;
inline constexpr uint64_t kCopyBatchBytes = 512ull << 20;

}  // namespace deltafin::setup
