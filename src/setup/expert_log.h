// ExpertLog: the durable record of which routed experts a stream install holds.
//
// File DIR/.deltafin/experts.log, append-only, 16-byte little-endian records:
//   u32 magic 0x58454644 ("DFEX") | u32 layer | u32 expert | u32 FNV-1a of the first 12 bytes
// A record is appended (and the log fdatasync'ed) only after the expert's bytes were written
// into its shard and fdatasync'ed, so a crash can lose a record but never mark a partial expert
// present. A torn or corrupt trailing record is ignored on load. Rewrite() replaces the whole
// log atomically (used to forget the experts of a shard that failed its sha256).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace deltafin::setup {

class ExpertLog {
 public:
  ~ExpertLog();
  // Opens (creating if missing) and reads every valid record.
  Status Open(const std::string& path, std::vector<std::pair<int64_t, int32_t>>* present);
  // Appends one record per expert of `layer` with one write and makes them durable with one
  // fdatasync. Thread-safe.
  Status Append(int64_t layer, const std::vector<int32_t>& experts);
  // Replaces the log with exactly these records (atomic: temp file + rename). Thread-safe.
  Status Rewrite(const std::vector<std::pair<int64_t, int32_t>>& present);

 private:
  std::string path_;
  int fd_ = -1;
  std::mutex mu_;
};

}  // namespace deltafin::setup
