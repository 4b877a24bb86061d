// The K3 tensor roster: every tensor a text checkpoint must contain, with dtype and shape, derived
// from a ModelConfig (docs/MODEL.md §2). One list serves both sides of the format: the loader
// validates a checkpoint against it and make-model writes exactly it, so the two cannot drift
// apart.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/dtype.h"
#include "weights/config.h"

namespace deltafin {

struct TensorSpec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
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
