// Prefill measured on a sample of the model, for `plan --prompt-tokens` (docs/PLAN.md "Prefill").
//
// A FLOP count at a kernel rate misses what a long wave spends outside the products (SiTU, the
// KDA recurrence, MLA attention over the cache, AttnRes, routing) and how the products' efficiency
// depends on the rows each expert gets. So where the machine is measured, `plan` measures those
// too: it writes a few-layer model with the model's own widths, expert count and top-k
// (make-model, experts mapped in RAM, a temporary folder), prefills a prompt through the engine in
// the scenario's wave size, and scales each op family's seconds by how many layers of its kind the
// real model has (KDA, MLA, MoE, dense, every layer, once). The sample prefills S = min(prompt,
// wave, kMaxSamplePositions) positions; a longer prompt scales every family by prompt/S, MLA
// attention (which grows with the cached positions) by (prompt/S)². Only the compute is sampled;
// `plan` adds the reads (PredictPrefill). A model whose sample would exceed kMaxSampleBytes (real
// K3: a MoE layer's experts are 15.7 GB) is not sampled: the FLOP model stands, and `plan` says so.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "base/status.h"

namespace deltafin::cli {

inline constexpr int64_t kMaxSamplePositions = 4096;
inline constexpr uint64_t kMaxSampleBytes = 1536ull << 20;

// A config.json's model fields: its "text_config" object, or the root where it has none (both
// spellings occur; `plan` and the sampler read the same one).
const nlohmann::json& TextConfigOf(const nlohmann::json& root);

// Layers of each kind in a config (its text_config), as the engine runs them.
struct LayerCounts {
  int64_t layers = 0, kda = 0, mla = 0, moe = 0, dense = 0;
};

class PrefillSampler {
 public:
  // `config_text`: the model's config.json. Fails (with the reason, for `plan` to print) when the
  // config cannot be sampled or the sample would be too big.
  static Result<PrefillSampler> Create(const std::string& config_text, int threads);

  // Predicted compute seconds of prefilling `prompt_tokens` in waves of `wave` positions.
  Result<double> Seconds(int64_t prompt_tokens, int64_t wave);

  int64_t sample_layers() const { return sample_.layers; }
  uint64_t sample_bytes() const { return sample_bytes_; }
  const std::string& dir() const { return dir_; }

  PrefillSampler(PrefillSampler&& other) noexcept;
  PrefillSampler& operator=(PrefillSampler&&) = delete;
  PrefillSampler(const PrefillSampler&) = delete;
  ~PrefillSampler();  // removes the sample's folder

 private:
  PrefillSampler() = default;
  LayerCounts model_, sample_;
  uint64_t sample_bytes_ = 0;
  int threads_ = 0;
  int64_t vocab_ = 0;
  std::string dir_;
};

}  // namespace deltafin::cli
