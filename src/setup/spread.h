// `deltafin spread`: copies an installed model's routed experts onto folders on other drives and
// records them in the model's placement file (weights/placement.h), so the expert streamer reads
// each expert from whichever copy is expected to finish first (weights/drive_set.h; issue 35,
// docs/STREAMING.md "Several drives").
//
// Each drive folder gets files with the model's shard names and sizes: the safetensors header is
// written, each copied expert sits at its own offset, everything else is a hole (the spine stays
// on the model folder's drive and is read from there). Which experts go where:
//   --copies N   every expert on N of the given drives, round-robin (default 1)
//   --hot TRACE  a router trace's counts (run --trace, docs/TRACE.md): each drive is filled with
//                the most used experts first, as far as its free space goes
// A copy is recorded only after its bytes were written, fdatasync'ed, dropped from the page cache
// and read back to the same SHA-256 as the source; the placement file is replaced durably after
// every batch. A run killed at any point (kill -9) therefore never records a copy that reads
// wrong, and running the same command again copies only what is not recorded yet.
// --move then takes every expert that has a verified copy off the model folder: the placement
// first records that the model folder no longer holds it, then the span is punched out of the
// shard (fallocate PUNCH_HOLE), so a crash between the two leaves the bytes unused, never used
// and gone. A model folder with moved experts must stream its experts (the engine does so).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace deltafin::setup {

struct SpreadOptions {
  std::string model_dir;
  std::vector<std::string> drives;  // folders, created if missing
  int copies = 1;                   // copies of each expert over `drives` (ignored with hot_trace)
  std::string hot_trace;            // router trace: place the most used experts first
  bool move = false;                // free the model folder's bytes of every copied expert
  uint64_t reserve_bytes = 64ull << 20;  // free space left on each drive
};

struct SpreadSummary {
  uint64_t experts = 0;      // routed experts of the model
  uint64_t copies_made = 0;  // copies written and verified by this run
  uint64_t bytes_copied = 0;
  uint64_t copies_recorded = 0;  // copies on drives (not the model folder) recorded in all
  uint64_t experts_moved = 0;    // experts not on the model folder any more
  uint64_t bytes_freed = 0;      // allocated bytes of the shards freed by this run's --move
  std::vector<std::string> warnings;
};

Result<SpreadSummary> Spread(const SpreadOptions& options);

}  // namespace deltafin::setup
