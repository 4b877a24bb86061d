// The K3 tensor roster: every tensor a text checkpoint must contain, with dtype and shape, derived
// from a ModelConfig (docs/MODEL.md §2). One list serves both sides of the format: the loader
// validates a checkpoint against it and make-model writes exactly it, so the two cannot drift
// apart. Every spine tensor of the roster carries a role (what the forward pass does with it), so
// the byte map (weights/spine_map.h) and everything that reads it select tensors by role, never by
// matching names.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/dtype.h"
#include "weights/config.h"

namespace deltafin {

// What one spine tensor is for. Global tensors (layer -1) first, then a decoder layer's: the
// common norms and AttnRes projections, KDA or MLA, the dense FFN or a MoE layer's non-experts.
enum class SpineRole : uint8_t {
  kNone,  // not a spine tensor (routed experts, vision tower)
  // Global.
  kEmbedding,
  kFinalNorm,
  kTailResNorm,
  kTailResProj,
  kLmHead,
  // Every layer.
  kInputNorm,
  kPostAttnNorm,
  kAttnResNorm,
  kMlpResNorm,
  kAttnResProj,
  kMlpResProj,
  // KDA layers.
  kKdaQ,
  kKdaK,
  kKdaV,
  kKdaQConv,
  kKdaKConv,
  kKdaVConv,
  kKdaFA,
  kKdaFB,
  kKdaDtBias,
  kKdaALog,
  kKdaB,
  kKdaG,
  kKdaONorm,
  kKdaO,
  // MLA layers.
  kMlaQA,
  kMlaQANorm,
  kMlaQB,
  kMlaKvA,
  kMlaKvANorm,
  kMlaKvB,
  kMlaG,
  kMlaO,
  // Dense FFN layers.
  kDenseGate,
  kDenseUp,
  kDenseDown,
  // MoE layers (the experts themselves are not spine).
  kRouter,
  kRouterBias,
  kLatentDown,
  kLatentNorm,
  kLatentUp,
  kSharedGate,
  kSharedUp,
  kSharedDown,
};

// A matrix the forward pass runs whole as y = W·x every step (model/linear.h): the projections,
// FFNs, router, latent projections and lm_head. Not the embedding (one row is gathered), not
// MLA's kv_b_proj (read in absorbed form, two small products per head), not the [1, H] AttnRes
// projections (folded into the mixes at load). These are also the tensors the row-int8 spine
// replaces at run time (weights/spine_int8.h).
bool IsLinearRole(SpineRole role);
// A matrix the spine ring and page-in read: the linear roles and kv_b_proj (weights.h,
// ForEachSpineMatrix visits exactly these, plus the lm_head).
bool IsSpineMatrixRole(SpineRole role);
// Short name for logs and errors ("kda.q_proj", "lm_head").
const char* SpineRoleName(SpineRole role);

struct TensorSpec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  SpineRole role = SpineRole::kNone;
};

inline const char kLayerPrefix[] = "language_model.model.layers.";

std::string LayerTensorName(int64_t layer, const std::string& suffix);
std::string ExpertTensorName(int64_t layer, int64_t expert, const std::string& suffix);

// The six expert tensors in physical order (w1 packed, w1 scale, w2 packed, w2 scale, w3 packed,
// w3 scale): suffixes and shapes. An expert's bytes are these six back to back.
std::vector<TensorSpec> ExpertTensorSpecs(const ModelConfig& c, int64_t layer, int64_t expert);

// Global tensors (embeddings, final norm, tail AttnRes, lm_head).
std::vector<TensorSpec> GlobalTensorSpecs(const ModelConfig& c);
// Non-expert tensors of one layer: common norms/AttnRes, KDA or MLA, dense MLP or MoE non-experts.
std::vector<TensorSpec> LayerTensorSpecs(const ModelConfig& c, int64_t layer);

}  // namespace deltafin
