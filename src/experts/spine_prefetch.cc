#include "experts/spine_prefetch.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

#include "model/tensor_roster.h"

namespace deltafin {

SpinePrefetch::SpinePrefetch(const ModelWeights& w) {
  const ModelConfig& c = w.config;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  layers_.resize(static_cast<size_t>(c.num_hidden_layers));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    std::vector<TensorSpec> specs = LayerTensorSpecs(c, l);
    if (l + 1 == c.num_hidden_layers) {
      for (auto& g : GlobalTensorSpecs(c)) specs.push_back(std::move(g));
    }
    std::vector<Range> ranges;
    for (const auto& spec : specs) {
      const TensorRecord* rec = w.checkpoint.Find(spec.name);
      if (rec == nullptr) continue;
      if (spec.name.find("embed_tokens") != std::string::npos) continue;  // one row per token
      const auto begin = reinterpret_cast<uintptr_t>(w.checkpoint.View(*rec).data);
      const uint64_t bytes = rec->entry.end - rec->entry.begin;
      ranges.push_back({begin / page * page, (begin + bytes + page - 1) / page * page});
    }
    std::sort(ranges.begin(), ranges.end(),
              [](const Range& a, const Range& b) { return a.begin < b.begin; });
    std::vector<Range>& merged = layers_[static_cast<size_t>(l)];
    for (const Range& r : ranges) {
      if (!merged.empty() && r.begin <= merged.back().end) {
        merged.back().end = std::max(merged.back().end, r.end);
      } else {
        merged.push_back(r);
      }
    }
  }
}

void SpinePrefetch::AdviseLayer(int64_t layer) const {
  if (layer < 0 || layer >= static_cast<int64_t>(layers_.size())) return;
  for (const Range& r : layers_[static_cast<size_t>(layer)]) {
    ::madvise(reinterpret_cast<void*>(r.begin), r.end - r.begin, MADV_WILLNEED);
  }
}

uint64_t SpinePrefetch::LayerBytes(int64_t layer) const {
  uint64_t total = 0;
  for (const Range& r : layers_[static_cast<size_t>(layer)]) total += r.end - r.begin;
  return total;
}

}  // namespace deltafin
