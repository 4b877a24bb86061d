// make-model: writes a deterministic, randomly initialised checkpoint with K3's exact on-disk
// layout (docs/MODEL.md §1–§2, §5.1–5.2), for tests, demos and benchmarks.
//
// The output must load through the same code path as a real K3 download (docs/VERIFICATION.md), so
// it reproduces every layout fact an engine could depend on: the kimi_k3/kimi_linear config with
// its quantization_config, K3 tensor names from the shared roster (tensor_roster.h), BF16/F32/U8
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
// Presets: `tiny` (docs/MODEL.md §7 with a 1024-entry vocabulary), `bench` (docs/PERFORMANCE.md
// "Benchmark definitions") and `k3` (K3's real text dimensions, docs/MODEL.md §1, and its real file
// layout: 96 shards = 3 spine shards + 92 expert shards + 1 shard of vision tensors, §2.1; 1.56 TB,
// so it is only ever written sparse). Sparse mode (`sparse`) writes every header and index exactly
// as usual but leaves all tensor data as holes (zeros) by seeking instead of writing: the files
// have their full sizes and cost only metadata. Zero data passes every load check (A_log padding
// must be 0; zero A_log entries are finite); MXFP4 scale bytes of 0 are outside the engine's exact
// range, so a sparse model runs with the scale audit off and unverified expert reads. Sparse models
// exist to exercise layout, I/O paths and memory plans at full size, not numerics (their logits are
// all zero). Overrides `key=value` replace text_config fields by name; `linear_attn_config.<field>`
// reaches the nested object; `num_hidden_layers` regenerates K3's KDA/MLA schedule and `vocab_size`
// moves the special-token ids.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"

namespace deltafin {

struct MakeModelOptions {
  std::string preset;                  // "tiny", "bench" or "k3"
  std::string out_dir;                 // created if missing; must be empty unless `force`
  uint64_t seed = 0;                   // weights are a function of (seed, tensor name, index)
  std::vector<std::string> overrides;  // "key=value", applied in order
  bool force = false;                  // replace the model files of a non-empty out_dir
  // Less commonly needed knobs (tests, tools):
  int threads = 0;      // generator threads; 0 = one per hardware thread
  bool fsync = true;    // flush every file to disk before it is renamed into place
  bool sparse = false;  // leave all tensor data as holes (zeros): headers only, metadata-fast
  // Non-expert shards are split below this, unless the preset fixes a spine shard count (k3: 3).
  uint64_t max_spine_shard_bytes = 2'000'000'000;
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

// One shard of the layout MakeModel writes, without writing it (for tests and tools).
struct ShardSummary {
  std::string file_name;
  uint64_t data_bytes = 0;  // tensor bytes (the file adds the safetensors header)
  size_t tensors = 0;
  std::string kind;  // "spine", "experts" or "vision"
};

// The shard layout of a preset plus overrides, as MakeModel would write it (same plan, no I/O).
Result<std::vector<ShardSummary>> PlanModelShards(const MakeModelOptions& opts);

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
