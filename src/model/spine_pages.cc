#include "model/spine_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

namespace deltafin {

SpinePages::SpinePages(const ModelWeights& w) {
  page_ = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  groups_.resize(w.layers.size() + 1);
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const LayerWeights& lw = w.layers[i];
    std::vector<Range>* g = &groups_[i];
    if (lw.kind == AttentionKind::kKda) {
      for (const SpineMatrix* m :
           {&lw.kda.q_proj, &lw.kda.k_proj, &lw.kda.v_proj, &lw.kda.f_a_proj, &lw.kda.f_b_proj,
            &lw.kda.b_proj, &lw.kda.g_proj, &lw.kda.o_proj})
        Add(g, *m);
    } else {
      for (const SpineMatrix* m : {&lw.mla.q_a_proj, &lw.mla.q_b_proj, &lw.mla.kv_a_proj,
                                   &lw.mla.kv_b_proj, &lw.mla.g_proj, &lw.mla.o_proj})
        Add(g, *m);
    }
    const GatedFfnWeights& ffn = lw.is_moe ? lw.moe.shared : lw.dense;
    for (const SpineMatrix* m : {&ffn.gate_proj, &ffn.up_proj, &ffn.down_proj}) Add(g, *m);
    if (lw.is_moe) {
      for (const SpineMatrix* m : {&lw.moe.router, &lw.moe.latent_down, &lw.moe.latent_up})
        Add(g, *m);
    }
  }
  Add(&groups_.back(), w.lm_head);
  size_t most_pages = 0;
  for (const auto& g : groups_) {
    for (const Range& r : g) most_pages = std::max(most_pages, r.bytes / page_);
  }
  residency_.resize(most_pages);
}

void SpinePages::Add(std::vector<Range>* group, const void* data, size_t bytes) {
  if (data == nullptr || bytes == 0) return;
  // Page-align by offsetting the pointer itself (no integer-to-pointer cast).
  const auto start = reinterpret_cast<uintptr_t>(data);
  const uintptr_t begin = start & ~(static_cast<uintptr_t>(page_) - 1);
  const uintptr_t end = (start + bytes + page_ - 1) & ~(static_cast<uintptr_t>(page_) - 1);
  const uint8_t* first = static_cast<const uint8_t*>(data) - (start - begin);
  group->push_back({first, static_cast<size_t>(end - begin)});
}

void SpinePages::Add(std::vector<Range>* group, const SpineMatrix& m) {
  const auto elements = static_cast<size_t>(m.rows) * static_cast<size_t>(m.cols);
  // The int8 spine computes from its own mapped copy; the BF16 pages are then never touched.
  if (m.q != nullptr) {
    Add(group, m.q, elements);
  } else {
    Add(group, m.data, elements * sizeof(uint16_t));
  }
}

uint64_t SpinePages::MakeResident(int64_t group) {
  uint64_t missing = 0;
  for (const Range& r : groups_[static_cast<size_t>(group)]) {
    const size_t pages = r.bytes / page_;
    void* addr = const_cast<uint8_t*>(r.begin);
#if defined(__APPLE__)
    auto* vec = reinterpret_cast<char*>(residency_.data());
#else
    unsigned char* vec = residency_.data();
#endif
    if (::mincore(addr, r.bytes, vec) != 0) continue;  // not mapped memory: nothing to bring in
    size_t absent = 0;
    for (size_t p = 0; p < pages; ++p) absent += (residency_[p] & 1) == 0;
    if (absent == 0) continue;
    ::madvise(addr, r.bytes, MADV_WILLNEED);
    unsigned sink = 0;
    for (size_t p = 0; p < pages; ++p) {
      if ((residency_[p] & 1) == 0)
        sink += *reinterpret_cast<const volatile uint8_t*>(r.begin + p * page_);
    }
    static_cast<void>(sink);
    missing += absent;
  }
  return missing * page_;
}

}  // namespace deltafin
