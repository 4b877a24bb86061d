// Disk probes with decode's own access pattern, for the floors of `bench decode` and `run --stats`
// (docs/STREAMING.md): a floor divides the bytes a step had to read by a bandwidth, and on a
// virtual disk that bandwidth depends on the sizes and order of the reads, so the probe reads what
// decode reads.
//
//   ProbeExpertReads  `count` whole experts at random across the MoE layers (a resident spine:
//                     decode reads nothing else)
//   ProbeDecodeReads  one decode step with the spine streamed: in pass order, each streamed
//                     group's ring chunks, then top-k random experts of that layer, then the
//                     lm_head's chunks when it streams
//
// Both read with the engine's reader threads and read mode into buffers of their own, never into
// the expert cache or the ring's slots, and return bytes per second.
#pragma once

#include <cstdint>
#include <functional>

#include "base/status.h"
#include "weights/expert_streamer.h"
#include "weights/spine_ring.h"
#include "weights/weights.h"

namespace deltafin {

// Runs reads 0..count-1 on `threads` threads, each thread with its own buffer of `capacity` bytes
// aligned for direct I/O; `read(i, buffer)` performs read i. Returns the wall seconds, or the first
// error (the remaining reads are then skipped).
Result<double> TimeParallelReads(int threads, int64_t count, size_t capacity,
                                 const std::function<Status(int64_t, uint8_t*)>& read);

Result<double> ProbeExpertReads(const ModelWeights& weights, ExpertSpanReader& reader, int threads,
                                int64_t count, uint64_t seed);

Result<double> ProbeDecodeReads(const ModelWeights& weights, ExpertSpanReader& reader,
                                const SpineRing& ring, int threads, uint64_t seed);

}  // namespace deltafin
