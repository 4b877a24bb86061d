// The memory planner: how the engine divides its RAM budget (docs/STREAMING.md, "Memory plan").
//
// The budget is --mem-limit, or the machine's memory (the cgroup v2 memory.max or cgroup v1
// memory.limit_in_bytes of this process when lower than physical memory) minus headroom for the
// binary, the allocator and the kernel. Out of it come, in this order: the session (recurrent
// state, latent cache, working buffers), the spine (resident when it fits), and the routed
// experts: all of them mapped when everything fits, else a RAM cache of what is left, read from
// disk. A spine that does not fit streams through a ring of layer buffers; what the budget
// leaves after the session, the smallest expert cache and the ring pins spine layers (RAM given
// to the spine saves a read every token; an expert cache under K3's flat routing saves few), and
// the rest goes to the expert cache. A budget that cannot hold the session plus the smallest
// expert cache (and, streaming the spine, the ring) is refused at startup with the numbers.
//
// Prefill waves (docs/STREAMING.md "Prefill waves"): the session's working buffers grow with the
// positions one prefill pass holds. The plan is made with the smallest wave first (the session
// above counts it). Then the wave grows, with at most half of the memory free at each step, to
// the preferred wave (2,048 positions, or the context when shorter) before a streamed spine's
// pins and the expert cache take what is left, and beyond it, up to the whole context, only into
// what they leave. A fixed wave (--prefill-chunk N) does not grow; one that does not fit is
// refused with the numbers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/byte_size.h"
#include "base/status.h"

namespace deltafin {

struct MemoryNeeds {
  uint64_t spine_bytes = 0;       // every non-expert tensor
  uint64_t all_expert_bytes = 0;  // every routed expert
  uint64_t session_bytes = 0;     // one session's state and working buffers (smallest wave)
  // Prefill waves: the working-buffer bytes each position of a wave adds to session_bytes, the
  // wave session_bytes counts, and the largest wave wanted (the context capacity, or a fixed
  // --prefill-chunk, equal to wave_min then).
  uint64_t session_bytes_per_position = 0;
  int64_t wave_min = 1;
  int64_t wave_max = 1;
  bool wave_fixed = false;           // --prefill-chunk N: fixed chunks, not a planned wave
  uint64_t min_expert_cache = 0;     // the smallest cache streaming works with
  uint64_t largest_layer_spine = 0;  // the biggest layer's spine tensors (streamed spine)
  // A streamed spine's groups (weights/spine_ring.h): each decoder layer's spine tensors, then the
  // lm_head; and the ring depth asked for (--spine-readahead).
  std::vector<uint64_t> spine_groups;
  int spine_ring_depth = 2;
};

// Where the budget came from, e.g. "cgroup v1 limit", "physical memory", "--mem-limit".
struct MemoryBudget {
  uint64_t bytes = 0;
  std::string source;
};

// The machine's budget: min(physical memory, this process's cgroup limit) minus headroom
// (10%, at least 256 MiB).
Result<MemoryBudget> MachineMemoryBudget();

enum class ExpertPlacement { kAuto, kMapped, kStreamed };

// The wave the plan reserves before pins and expert cache (positions).
inline constexpr int64_t kPreferredWave = 2048;

struct MemoryPlan {
  MemoryBudget budget;
  MemoryNeeds needs;
  bool experts_streamed = false;
  bool spine_resident = true;
  uint64_t expert_cache_bytes = 0;  // streamed experts only
  // A streamed spine: the groups read once and kept (index as needs.spine_groups), their bytes,
  // and the ring the others stream through: depth slots of the largest streamed group.
  std::vector<bool> spine_pinned;
  uint64_t spine_pinned_bytes = 0;
  uint64_t spine_streamed_bytes = 0;  // per token
  int spine_ring_depth = 0;
  uint64_t spine_ring_slot_bytes = 0;
  // Positions one prefill pass processes (a planned wave, or the fixed --prefill-chunk), and one
  // session's bytes with its buffers sized for it (needs.session_bytes is the smallest wave's).
  int64_t wave_positions = 1;
  uint64_t session_bytes = 0;
  // One line per decision, for the startup log.
  std::string Describe() const;
};

// `cache_request`: an explicit expert cache size (0 = what the budget leaves).
Result<MemoryPlan> PlanMemory(const MemoryNeeds& needs, const MemoryBudget& budget,
                              ExpertPlacement placement, uint64_t cache_request);

}  // namespace deltafin
