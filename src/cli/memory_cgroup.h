// MemoryCgroup: a fresh memory cgroup with a byte limit, for running a benchmark under a real
// memory limit (docs/PERFORMANCE.md "Benchmark definitions"): with the limit in place the page
// cache cannot serve what the engine's budget excludes, because page cache pages count against
// the cgroup too.
//
// Created as a child of this process's own memory cgroup: cgroup v1
// (/sys/fs/cgroup/memory/<own path>/deltafin-<pid>, memory.limit_in_bytes) or v2
// (/sys/fs/cgroup/<own path>/deltafin-<pid>, memory.max; the parent must delegate the memory
// controller). Needs write access there (root, or a delegated subtree). Linux only.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "base/status.h"

namespace deltafin::cli {

class MemoryCgroup {
 public:
  static Result<MemoryCgroup> Create(uint64_t limit_bytes);
  MemoryCgroup() = default;
  MemoryCgroup(MemoryCgroup&& other) noexcept;
  MemoryCgroup& operator=(MemoryCgroup&& other) noexcept;
  MemoryCgroup(const MemoryCgroup&) = delete;
  MemoryCgroup& operator=(const MemoryCgroup&) = delete;
  // Removes the cgroup (its processes must have exited).
  ~MemoryCgroup();

  Status AddProcess(pid_t pid) const;
  // The most memory the cgroup used (v1 memory.max_usage_in_bytes, v2 memory.peak); 0 if the
  // kernel does not report it.
  uint64_t PeakBytes() const;
  const std::string& path() const { return path_; }
  uint64_t limit() const { return limit_; }
  int version() const { return version_; }

 private:
  std::string path_;
  uint64_t limit_ = 0;
  int version_ = 0;
};

// Writes back dirty pages and drops the clean page cache (root only), so that a benchmark starts
// cold. Returns false where that is not permitted.
bool DropPageCache();

}  // namespace deltafin::cli
