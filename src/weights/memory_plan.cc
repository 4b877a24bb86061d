#include "weights/memory_plan.h"

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
                         HumanBytes(needs.session_bytes) + " with prefill buffers for " +
                         std::to_string(needs.wave_min) + " positions" +
                         (needs.wave_fixed ? " (--prefill-chunk)" : "") + ", spine " +
                         HumanBytes(needs.spine_bytes) + ", smallest expert cache " +
                         HumanBytes(needs.min_expert_cache) + ")");
  };
  const uint64_t everything = needs.session_bytes + needs.spine_bytes + needs.all_expert_bytes;
  plan.wave_positions = needs.wave_min;
  plan.session_bytes = needs.session_bytes;
  // Grows the wave towards `up_to` positions with at most half of `free_bytes` (what the plan
  // leaves at this point), adding the bytes to wave_extra. A fixed chunk never grows.
  const uint64_t per = std::max<uint64_t>(needs.session_bytes_per_position, 1);
  uint64_t wave_extra = 0;
  auto grow_wave = [&](uint64_t free_bytes, int64_t up_to) {
    if (needs.wave_fixed || up_to <= plan.wave_positions) return;
    const uint64_t add =
        std::min(static_cast<uint64_t>(up_to - plan.wave_positions), free_bytes / 2 / per);
    plan.wave_positions += static_cast<int64_t>(add);
    wave_extra += add * per;
    plan.session_bytes += add * per;
  };
  const int64_t preferred = std::min(needs.wave_max, kPreferredWave);
  plan.experts_streamed = placement == ExpertPlacement::kStreamed ||
                          (placement == ExpertPlacement::kAuto && everything > b);
  if (!plan.experts_streamed) {
    if (everything > b && placement == ExpertPlacement::kMapped) {
      return too_small("keeping every expert in RAM (--experts mapped)", everything);
    }
    const uint64_t free_bytes = everything <= b ? b - everything : 0;
    grow_wave(free_bytes, preferred);
    grow_wave(free_bytes - wave_extra, needs.wave_max);
    return plan;
  }
  const uint64_t streaming_min = needs.session_bytes + needs.min_expert_cache;
  const uint64_t resident_min = streaming_min + needs.spine_bytes;
  plan.spine_resident = resident_min <= b;
  uint64_t spine_share = needs.spine_bytes;
  if (!plan.spine_resident) {
    // Ring slots hold the largest group plus the alignment and small tensors read along.
    auto slot_for = [](uint64_t group) { return group + group / 64 + (256ull << 10); };
    uint64_t largest = 0;
    for (uint64_t g : needs.spine_groups) largest = std::max(largest, g);
    const int depth = std::clamp(needs.spine_ring_depth, 1, 16);
    const uint64_t ring = static_cast<uint64_t>(depth) * slot_for(largest);
    const uint64_t floor = streaming_min + ring;
    if (floor > b) {
      return too_small("streaming the spine through a ring of " + std::to_string(depth) +
                           " layer buffers of " + HumanBytes(slot_for(largest)),
                       floor);
    }
    // The preferred wave comes before the pins: a long prompt otherwise re-reads every expert of
    // every layer once per 32 positions. Beyond it the wave only takes what the pins leave.
    grow_wave(b - floor, preferred);
    // Pin the biggest groups first: every pinned byte is a byte not read again each token,
    // whichever layer it belongs to, and big groups use the budget with the fewest leftovers.
    std::vector<size_t> order(needs.spine_groups.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    // Ties keep layer order. (std::sort with the index as tie-break, not std::stable_sort: its
    // nothrow temporary buffer trips the golden test's allocation hooks under ASan.)
    std::sort(order.begin(), order.end(), [&](size_t x, size_t y) {
      const uint64_t gx = needs.spine_groups[x], gy = needs.spine_groups[y];
      return gx != gy ? gx > gy : x < y;
    });
    // The ring's slots only need to hold the largest group that still streams, so pinning the
    // biggest groups also shrinks the ring: account for that at each step.
    const uint64_t d = static_cast<uint64_t>(depth);
    uint64_t pinned_share = 0;
    int64_t largest_skipped = -1;  // the first group that did not fit streams, and sizes slots
    plan.spine_pinned.assign(order.size(), false);
    for (size_t k = 0; k < order.size(); ++k) {
      const uint64_t g = needs.spine_groups[order[k]];
      const uint64_t next_largest = largest_skipped >= 0   ? static_cast<uint64_t>(largest_skipped)
                                    : k + 1 < order.size() ? needs.spine_groups[order[k + 1]]
                                                           : 0;
      const uint64_t ring_after = next_largest > 0 ? d * slot_for(next_largest) : 0;
      if (streaming_min + wave_extra + pinned_share + slot_for(g) + ring_after <= b) {
        plan.spine_pinned[order[k]] = true;
        plan.spine_pinned_bytes += g;
        pinned_share += slot_for(g);
      } else if (largest_skipped < 0) {
        largest_skipped = static_cast<int64_t>(g);
      }
    }
    uint64_t streamed_largest = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      if (plan.spine_pinned[i]) continue;
      streamed_largest = std::max(streamed_largest, needs.spine_groups[i]);
      plan.spine_streamed_bytes += needs.spine_groups[i];
    }
    plan.spine_ring_depth = depth;
    plan.spine_ring_slot_bytes = streamed_largest > 0 ? slot_for(streamed_largest) : 0;
    spine_share = pinned_share + d * plan.spine_ring_slot_bytes;
  }
  const uint64_t floor = streaming_min + spine_share;
  if (floor + wave_extra > b) {
    return too_small("streaming experts with the spine resident", floor + wave_extra);
  }
  grow_wave(b - floor - wave_extra, preferred);
  grow_wave(b - floor - wave_extra, needs.wave_max);
  uint64_t cache = b - needs.session_bytes - wave_extra - spine_share;
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
  o << "  session state and buffers: " << HumanBytes(session_bytes) << "\n";
  if (needs.wave_fixed) {
    o << "  prefill: fixed chunks of " << wave_positions << " positions (--prefill-chunk)\n";
  } else {
    o << "  prefill wave: " << wave_positions << " positions"
      << (wave_positions >= needs.wave_max ? " (the whole context)" : " (what the budget holds)")
      << ", " << HumanBytes(needs.session_bytes_per_position) << " of buffers per position\n";
  }
  o << "  spine: " << HumanBytes(needs.spine_bytes)
    << (spine_resident ? ", resident (mapped)" : ", does not fit") << "\n";
  if (!spine_resident) {
    int pinned_layers = 0;
    for (size_t i = 0; i + 1 < spine_pinned.size(); ++i) pinned_layers += spine_pinned[i] ? 1 : 0;
    const bool lm_head = !spine_pinned.empty() && spine_pinned.back();
    o << "  spine pinned: " << pinned_layers << " of " << spine_pinned.size() - 1 << " layers"
      << (lm_head ? " and the lm_head" : "") << ", " << HumanBytes(spine_pinned_bytes) << "\n";
    o << "  spine streamed: " << HumanBytes(spine_streamed_bytes)
      << " per token, direct reads into a ring of " << spine_ring_depth << " buffers of "
      << HumanBytes(spine_ring_slot_bytes)
      << (spine_ring_depth > 1 ? " (layers ahead read while one computes)" : " (no read-ahead)")
      << "\n";
  }
  if (experts_streamed) {
    o << "  routed experts: " << HumanBytes(needs.all_expert_bytes)
      << " on disk, streamed through a RAM cache of " << HumanBytes(expert_cache_bytes);
  } else {
    o << "  routed experts: " << HumanBytes(needs.all_expert_bytes) << ", mapped (all fit in RAM)";
  }
  return o.str();
}

}  // namespace deltafin
