// make-model: writes a deterministic, randomly initialised checkpoint with K3's exact on-disk
// layout (spec §1–§2, §5.1–5.2), for tests, demos and benchmarks.
//
// The output must load through the same code path as a real K3 download (DESIGN.md §5), so it
// reproduces every layout fact an engine could depend on: the kimi_k3/kimi_linear config with its
// quantization_config, K3 tensor names from the shared roster (tensor_roster.h), BF16/F32/U8
// dtypes, `model-NNNNN-of-MMMMMM.safetensors` shard names, tensors ordered inside a shard like
// common writers (dtype width descending, then name), each MoE layer's experts in one shard with
// each expert's six tensors contiguous, an index sorted by name, and the tokenizer files.
//
// Weights are a pure function of (seed, tensor name, element index), so output does not depend on
// the thread count and two runs with one seed are byte-identical. They are scaled so activations
// stay O(1) through all layers: linears N(0, 1/in), norms 1 ± 0.1, embeddings N(0, 1), and MXFP4
// experts whose dequantised RMS is about 1/sqrt(in). Expert bytes are drawn directly as random
// nibbles plus per-group scale bytes (no float quantisation), so writing the 17 GB `bench` preset
// runs at disk speed.
//
// Presets: `tiny` (spec §7 with a 1024-entry vocabulary) and `bench` (docs/PERFORMANCE.md
// "Benchmark definitions").
// Overrides `key=value` replace text_config fields by name; `linear_attn_config.<field>` reaches
// the nested object; `num_hidden_layers` regenerates K3's KDA/MLA schedule and `vocab_size` moves
// the special-token ids.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"

namespace deltafin {

struct MakeModelOptions {
  std::string preset;                  // "tiny" or "bench"
  std::string out_dir;                 // created if missing; must be empty unless `force`
  uint64_t seed = 0;                   // weights are a function of (seed, tensor name, index)
  std::vector<std::string> overrides;  // "key=value", applied in order
  bool force = false;                  // replace the model files of a non-empty out_dir
  // Less commonly needed knobs (tests, tools):
  int threads = 0;    // generator threads; 0 = one per hardware thread
  bool fsync = true;  // flush every file to disk before it is renamed into place
  uint64_t max_spine_shard_bytes = 2'000'000'000;  // non-expert shards are split below this
  // Called from the writing thread with (bytes written, total bytes), at most about once a second.
  std::function<void(uint64_t, uint64_t)> progress;
};

struct MakeModelSummary {
  std::vector<std::string> files;  // names (inside out_dir) of every file written
  uint64_t total_bytes = 0;        // sum of their sizes
  double seconds = 0;              // wall time of MakeModel
};

// The preset names MakeModel accepts.
std::vector<std::string> MakeModelPresets();

// Writes config.json, generation_config.json, model-NNNNN-of-MMMMMM.safetensors shards,
// model.safetensors.index.json, tiktoken.model and tokenizer_config.json into out_dir. Every file
// is written under a temporary name and renamed into place at the end (config.json last), so an
// interrupted run never leaves a model that looks complete.
Status MakeModel(const MakeModelOptions& opts, MakeModelSummary* summary = nullptr);

// The config.json text for a preset plus overrides (exposed for tests). The result has been
// validated with ParseModelConfig.
Result<std::string> PresetConfigJson(const std::string& preset,
                                     const std::vector<std::string>& overrides);

}  // namespace deltafin
