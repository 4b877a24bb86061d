#include "experts/memory_plan.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace deltafin {

namespace {

// A cgroup limit file holds a number or "max"; v1 reports "no limit" as a huge number.
bool ReadLimit(const std::string& path, uint64_t* out) {
  std::ifstream f(path);
  std::string text;
  if (!(f >> text) || text == "max") return false;
  try {
    *out = std::stoull(text);
  } catch (...) {
    return false;
  }
  return *out < (1ull << 60);
}

// The limit of this process's own memory cgroup, if any (v2 unified or v1 memory controller).
bool CgroupLimit(uint64_t* limit, std::string* source) {
  std::ifstream f("/proc/self/cgroup");
  std::string line;
  while (std::getline(f, line)) {
    // "hierarchy-ID:controller-list:cgroup-path"
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers.empty()) {
      if (ReadLimit("/sys/fs/cgroup" + path + "/memory.max", limit)) {
        *source = "cgroup v2 memory.max of " + path;
        return true;
      }
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      if (ReadLimit("/sys/fs/cgroup/memory" + path + "/memory.limit_in_bytes", limit)) {
        *source = "cgroup v1 memory limit of " + path;
        return true;
      }
    }
  }
  return false;
}

}  // namespace

Result<MemoryBudget> MachineMemoryBudget() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return Status::Error("cannot read the machine's memory size");
  uint64_t total = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
  std::string source = "physical memory";
  uint64_t limit = 0;
  std::string cg;
  if (CgroupLimit(&limit, &cg) && limit < total) {
    total = limit;
    source = cg;
  }
  const uint64_t headroom = std::max<uint64_t>(total / 10, 256ull << 20);
  if (total <= headroom)
    return Status::Error("memory limit " + HumanBytes(total) + " is too small");
  return MemoryBudget{total - headroom, source + " minus " + HumanBytes(headroom) + " headroom"};
}

Result<MemoryPlan> PlanMemory(const MemoryNeeds& needs, const MemoryBudget& budget,
                              ExpertPlacement placement, uint64_t cache_request) {
  MemoryPlan plan;
  plan.budget = budget;
  plan.needs = needs;
  const uint64_t b = budget.bytes;
  auto too_small = [&](const std::string& what, uint64_t need) {
    return Status::Error("memory budget " + HumanBytes(b) + " (" + budget.source +
                         ") is too small: " + what + " needs " + HumanBytes(need) + " (session " +
                         HumanBytes(needs.session_bytes) + ", spine " +
                         HumanBytes(needs.spine_bytes) + ", smallest expert cache " +
                         HumanBytes(needs.min_expert_cache) + ")");
  };
  const uint64_t everything = needs.session_bytes + needs.spine_bytes + needs.all_expert_bytes;
  plan.experts_streamed = placement == ExpertPlacement::kStreamed ||
                          (placement == ExpertPlacement::kAuto && everything > b);
  if (!plan.experts_streamed) {
    if (everything > b && placement == ExpertPlacement::kMapped) {
      return too_small("keeping every expert in RAM (--experts mapped)", everything);
    }
    return plan;
  }
  const uint64_t streaming_min = needs.session_bytes + needs.min_expert_cache;
  const uint64_t resident_min = streaming_min + needs.spine_bytes;
  plan.spine_resident = resident_min <= b;
  const uint64_t spine_share =
      plan.spine_resident ? needs.spine_bytes : 2 * needs.largest_layer_spine;
  const uint64_t floor = streaming_min + spine_share;
  if (floor > b) return too_small("streaming experts with the spine read layer by layer", floor);
  uint64_t cache = b - needs.session_bytes - spine_share;
  // A streamed spine is re-read through the page cache, which needs the memory more than an
  // expert cache does (K3's flat routing gives an expert cache few hits): give it three quarters.
  if (!plan.spine_resident) cache = std::max(needs.min_expert_cache, cache / 4);
  cache = std::min(cache, needs.all_expert_bytes + needs.min_expert_cache);
  if (cache_request > 0) {
    if (cache_request < needs.min_expert_cache) {
      return Status::Error("--expert-cache " + HumanBytes(cache_request) +
                           " is below the smallest working cache of " +
                           HumanBytes(needs.min_expert_cache));
    }
    if (cache_request > cache) {
      return Status::Error("--expert-cache " + HumanBytes(cache_request) +
                           " does not fit: the budget leaves " + HumanBytes(cache));
    }
    cache = cache_request;
  }
  plan.expert_cache_bytes = cache;
  return plan;
}

std::string MemoryPlan::Describe() const {
  std::ostringstream o;
  o << "memory plan: budget " << HumanBytes(budget.bytes) << " (" << budget.source << ")\n";
  o << "  session state and buffers: " << HumanBytes(needs.session_bytes) << "\n";
  o << "  spine: " << HumanBytes(needs.spine_bytes)
    << (spine_resident ? ", resident (mapped)"
                       : ", does not fit: mapped and re-read through the page cache layer by "
                         "layer")
    << "\n";
  if (experts_streamed) {
    o << "  routed experts: " << HumanBytes(needs.all_expert_bytes)
      << " on disk, streamed through a RAM cache of " << HumanBytes(expert_cache_bytes);
  } else {
    o << "  routed experts: " << HumanBytes(needs.all_expert_bytes) << ", mapped (all fit in RAM)";
  }
  return o.str();
}

}  // namespace deltafin
