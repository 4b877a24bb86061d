// The disk probes of `deltafin plan` (docs/PLAN.md): expert-size direct reads over queue depths,
// on the model's expert shards or on a temporary probe file, and further drives (`plan --drive
// DIR`, a folder on a drive that is not in the placement yet) measured the same way through a
// probe file of their own. Apart from cmd_plan.cc so that the unit tests can measure a folder.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace deltafin::cli {

// A temporary folder removed, with what it holds, on scope exit (also on an error's return).
struct TempDir {
  std::string path;
  TempDir() = default;
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir();
};

// How hard a disk is probed: `plan --quick` and the engine's reads in flight (--io-threads).
struct DiskProbeOptions {
  bool quick = false;
  int io_threads = 8;
};

struct DepthResult {
  int depth = 0;
  double bps = 0;
};

// Direct reads of one span size over queue depths on some files.
struct DepthSweep {
  std::vector<DepthResult> depths;  // each depth measured, in increasing order
  double bps = 0;                   // the rate at --io-threads: the engine's depth, the one used
  double cpu_s_per_byte = 0;        // the process's CPU seconds per byte read at that depth
  bool buffered = false;            // a file refused O_DIRECT (tmpfs): page-cache rates
  bool in_memory = false;           // MeasureDrive: the folder is on tmpfs or ramfs, i.e. in RAM
};

// The process's CPU seconds so far (user and system): the readers' cost per byte.
double CpuSeconds();

// `depth` threads each issuing one synchronous direct read of `span` bytes at a time, at random
// offsets over `files`, until `max_bytes` are read or `max_seconds` pass. Returns bytes/s; the
// process's CPU seconds per byte go to *cpu_per_byte, and whether a file fell back to buffered
// reads to *buffered (either may be null).
Result<double> ProbeDirectReads(const std::vector<std::string>& files, uint64_t span, int depth,
                                uint64_t max_bytes, double max_seconds, uint64_t seed,
                                double* cpu_per_byte, bool* buffered = nullptr);

// Reads of `span` bytes on `files` at queue depths 1, 2, 4 and --io-threads (--quick: 1 and
// --io-threads), each until a byte or time limit.
Result<DepthSweep> MeasureDepths(const std::vector<std::string>& files, uint64_t span,
                                 const DiskProbeOptions& o, uint64_t seed);

// The size of a probe file: 1 GiB (--quick: 128 MiB), at least four spans, so that random reads
// rarely hit the same bytes twice.
uint64_t ProbeFileBytes(bool quick, uint64_t span);

// Free bytes on the filesystem holding `dir` (0: unknown).
uint64_t FreeDisk(const std::string& dir);

// A file of `bytes` random bytes in a new temporary folder in `dir` (held by *holder, which
// removes it), written, fsynced and dropped from the page cache, for probing a disk without a
// model. `what` names the folder in errors ("--probe-dir /x").
Result<std::string> WriteProbeFile(const std::string& dir, uint64_t bytes, const std::string& what,
                                   TempDir* holder);

// Why `dir` cannot hold a probe file of `bytes` (a missing folder, not a folder, not writable, too
// little free space), as a message naming it; nullopt when it can.
std::optional<std::string> ProbeFolderProblem(const std::string& dir, uint64_t bytes);

// The first of `earlier` on the same device (st_dev) as `dir`: such a drive shares its bandwidth
// and adds none. nullopt when none is (or `dir` cannot be examined).
std::optional<std::string> SameDeviceAs(const std::string& dir,
                                        const std::vector<std::string>& earlier);

// A further drive's expert read rate: a probe file in `dir`, reads of `span` bytes over queue
// depths (MeasureDepths, as the model's own disk is measured), the file removed afterwards. Sets
// in_memory where `dir` is on tmpfs or ramfs (which may take O_DIRECT and still read from RAM).
Result<DepthSweep> MeasureDrive(const std::string& dir, uint64_t span, const DiskProbeOptions& o);

}  // namespace deltafin::cli
