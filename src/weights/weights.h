// ModelWeights: every tensor the forward pass reads, bound to checkpoint bytes and validated once.
//
// Binding walks the tensor roster (tensor_roster.h) and fails, naming the tensor, on anything
// missing or of the wrong dtype or shape. BF16 matrices stay where they are (memory-mapped shard
// bytes, widened on the fly by the kernels); small vectors (norm weights, AttnRes pseudo-queries)
// are widened to fp32 once here. Routed experts are recorded as the start of their contiguous
// span: the six tensors of one expert must sit back to back in roster order, which is what lets an
// expert be one positional read (docs/MODEL.md §2.8). Binding also writes the spine byte map
// (spine_map.h): where each spine tensor's bytes are, for everything that reads them from disk.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/status.h"
#include "format/checkpoint.h"
#include "io/mapped_file.h"
#include "weights/config.h"
#include "weights/spine_map.h"
#include "weights/tensor_roster.h"

namespace deltafin {

// A spine matrix W[rows, cols] used as y = W·x, held as BF16 or as row-int8: `data` is the BF16
// checkpoint tensor [rows, cols]; with the row-int8 spine (--spine int8, docs/MODEL.md §3.6,
// docs/INT8.md) `q` points at its int8 copy [rows, cols] and `q_scales` at its per-row scales (the
// stored f16 scales widened to fp32), and model/linear.h uses those instead of `data`.
struct SpineMatrix {
  const uint16_t* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  const int8_t* q = nullptr;
  const float* q_scales = nullptr;
};

// Byte offsets of the six tensors inside one expert span (docs/MODEL.md §2.8; tiny/bench scale with
// dims).
//   [w1 packed | w1 scale | w2 packed | w2 scale | w3 packed | w3 scale]
//   w1, w3: [inter, latent] (gate, up: latent -> inter); w2: [latent, inter] (down)
struct ExpertLayout {
  uint64_t w1_packed = 0, w1_scale = 0, w2_packed = 0, w2_scale = 0, w3_packed = 0, w3_scale = 0;
  uint64_t bytes = 0;
  static ExpertLayout For(const ModelConfig& c);
};

struct KdaWeights {
  SpineMatrix q_proj, k_proj, v_proj;  // [P, H]
  const float* q_conv = nullptr;       // [P, 1, K] (tap K-1 = current position)
  const float* k_conv = nullptr;
  const float* v_conv = nullptr;
  SpineMatrix f_a_proj;            // [head_dim, H]
  SpineMatrix f_b_proj;            // [P, head_dim]
  const float* dt_bias = nullptr;  // [P]
  AlignedBuffer<float> a_exp;      // [kda_heads] exp(A_log[h]), per head
  SpineMatrix b_proj;              // [kda_heads, H]
  SpineMatrix g_proj;              // [P, H] full-rank output gate
  const float* o_norm = nullptr;   // [head_dim], shared by all heads
  SpineMatrix o_proj;              // [H, P]
};

struct MlaWeights {
  SpineMatrix q_a_proj;           // [q_lora, H]
  AlignedBuffer<float> q_a_norm;  // [q_lora]
  SpineMatrix q_b_proj;   // [heads*(nope+rope), q_lora], head-major: nope rows then rope rows
  SpineMatrix kv_a_proj;  // [kv_lora+rope, H]: latent rows then rope rows
  AlignedBuffer<float> kv_a_norm;  // [kv_lora]
  SpineMatrix kv_b_proj;  // [heads*(nope+v), kv_lora], head-major: key-nope rows then value rows
  SpineMatrix g_proj;     // [heads*v, H]
  SpineMatrix o_proj;     // [H, heads*v]
};

struct GatedFfnWeights {           // dense layer-0 FFN and the fused shared experts
  SpineMatrix gate_proj, up_proj;  // [width, H]
  SpineMatrix down_proj;           // [H, width]
};

struct MoeWeights {
  SpineMatrix router;                      // [n_experts, H]
  const float* correction_bias = nullptr;  // [n_experts]
  SpineMatrix latent_down;                 // [latent, H]   "routed_expert_down_proj"
  AlignedBuffer<float> latent_norm;        // [latent] (empty when latent_moe_use_norm is false)
  SpineMatrix latent_up;                   // [H, latent]   "routed_expert_up_proj"
  GatedFfnWeights shared;
  std::vector<const uint8_t*> expert_spans;  // [n_experts] start of each expert's contiguous span
  int expert_shard = -1;                     // the one shard holding this layer's experts
  std::vector<uint64_t> expert_offsets;      // [n_experts] file offset of each span in that shard
};

struct LayerWeights {
  AttentionKind kind = AttentionKind::kKda;
  AlignedBuffer<float> input_norm;      // [H]
  AlignedBuffer<float> post_attn_norm;  // [H]
  AlignedBuffer<float> attn_res_query;  // [H] self_attention_res_norm ⊙ self_attention_res_proj
  AlignedBuffer<float> mlp_res_query;   // [H] mlp_res_norm ⊙ mlp_res_proj
  KdaWeights kda;
  MlaWeights mla;
  bool is_moe = false;
  GatedFfnWeights dense;
  MoeWeights moe;
};

// Calls fn(matrix, role) for every spine matrix of one decoder layer — attention, the dense FFN
// or the shared experts, then the router and latent projections of a MoE layer — in this fixed
// order: the tensors of IsSpineMatrixRole (tensor_roster.h) that the layer has. The one list of
// a layer's matrices: the spine ring, the page-in and the ring's layer copies all walk it, so a
// matrix added to LayerWeights is added here once. `Layer` is LayerWeights or const LayerWeights.
template <typename Layer, typename Fn>
void ForEachSpineMatrix(Layer& lw, Fn&& fn) {
  using R = SpineRole;
  if (lw.kind == AttentionKind::kKda) {
    auto& k = lw.kda;
    fn(k.q_proj, R::kKdaQ);
    fn(k.k_proj, R::kKdaK);
    fn(k.v_proj, R::kKdaV);
    fn(k.f_a_proj, R::kKdaFA);
    fn(k.f_b_proj, R::kKdaFB);
    fn(k.b_proj, R::kKdaB);
    fn(k.g_proj, R::kKdaG);
    fn(k.o_proj, R::kKdaO);
  } else {
    auto& a = lw.mla;
    fn(a.q_a_proj, R::kMlaQA);
    fn(a.q_b_proj, R::kMlaQB);
    fn(a.kv_a_proj, R::kMlaKvA);
    fn(a.kv_b_proj, R::kMlaKvB);
    fn(a.g_proj, R::kMlaG);
    fn(a.o_proj, R::kMlaO);
  }
  if (lw.is_moe) {
    fn(lw.moe.shared.gate_proj, R::kSharedGate);
    fn(lw.moe.shared.up_proj, R::kSharedUp);
    fn(lw.moe.shared.down_proj, R::kSharedDown);
    fn(lw.moe.router, R::kRouter);
    fn(lw.moe.latent_down, R::kLatentDown);
    fn(lw.moe.latent_up, R::kLatentUp);
  } else {
    fn(lw.dense.gate_proj, R::kDenseGate);
    fn(lw.dense.up_proj, R::kDenseUp);
    fn(lw.dense.down_proj, R::kDenseDown);
  }
}

// The layer's matrix of `role`, or null when the layer has none (another attention kind, or a
// role that is not a spine matrix).
SpineMatrix* LayerMatrix(LayerWeights* lw, SpineRole role);

struct BindOptions {
  // Check every MXFP4 scale byte lies in [2, 252]. Reads all scale bytes, so it is a choice.
  bool audit_expert_scales = false;
};

struct ModelWeights {
  ModelConfig config;
  Checkpoint checkpoint;  // owns the mapped shards that the pointers below point into
  ExpertLayout expert_layout;
  const uint16_t* embed_tokens = nullptr;  // [vocab, H] BF16
  AlignedBuffer<float> final_norm;         // [H]
  AlignedBuffer<float> tail_res_query;     // [H] output_attn_res_norm ⊙ output_attn_res_proj
  SpineMatrix lm_head;                     // [vocab, H]
  std::vector<LayerWeights> layers;
  // The spine byte map (spine_map.h): one row per spine tensor, global tensors first, then layer
  // by layer in roster order; written at binding, re-aimed by AttachSpineInt8.
  std::vector<SpineTensorEntry> spine_map;
  // Row-int8 spine (weights/spine_int8.h): the mapped .i8 files and the widened row scales that the
  // matrices' q / q_scales point into. Empty in BF16 mode.
  std::vector<MappedFile> int8_files;
  std::vector<AlignedBuffer<float>> int8_scales;

  static Result<std::unique_ptr<ModelWeights>> Load(const std::string& model_dir,
                                                    const BindOptions& options);
  // The file a byte-map row's `file` names: checkpoint shard `file`, or past the shards the
  // row-int8 file int8_files[file - shards].
  const std::string& SpineFilePath(int file) const;
  size_t num_spine_files() const { return checkpoint.shards().size() + int8_files.size(); }
  // The same with the model's config.json already parsed (callers that needed it first).
  static Result<std::unique_ptr<ModelWeights>> Load(const std::string& model_dir,
                                                    ModelConfig config, const BindOptions& options);
};

// Checks that every scale byte of one expert lies in [2, 252]; the error names the tensor.
Status AuditExpertScales(const ModelConfig& c, const ExpertLayout& layout, const uint8_t* span,
                         int64_t layer, int64_t expert);

}  // namespace deltafin
