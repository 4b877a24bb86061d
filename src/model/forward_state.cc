// ForwardPass state snapshots: the per-sequence state a forward pass carries from one call to the
// next, as flat bytes (Session::SaveState / RestoreState, the server's prefix cache).
//
// What carries across calls: the position, each KDA layer's conv history [K-1, P] x3 and
// recurrent state [heads, dk, dv], and each MLA layer's latent and rope rows of the positions fed.
// Block AttnRes anchors are rebuilt per position inside a call (forward.h), and scratch buffers
// hold nothing between calls, so neither is saved. Layout (host byte order, fp32 raw bits):
//   int64 position, then per layer in order: KDA conv_q, conv_k, conv_v, recurrent;
//   MLA latent[0, position) rows, rope[0, position) rows.
#include <cstring>

#include "model/forward.h"

namespace deltafin {

namespace {

void Put(std::vector<uint8_t>* out, const void* p, size_t bytes) {
  const auto* b = static_cast<const uint8_t*>(p);
  out->insert(out->end(), b, b + bytes);
}

}  // namespace

uint64_t ForwardPass::StateBytes(int64_t position) const {
  uint64_t bytes = sizeof(int64_t);
  for (int64_t i = 0; i < c_.num_hidden_layers; ++i) {
    const auto li = static_cast<size_t>(i);
    if (c_.layer_kinds[li] == AttentionKind::kKda) {
      const KdaState& k = kda_[li];
      bytes += sizeof(float) *
               (k.conv_q.size() + k.conv_k.size() + k.conv_v.size() + k.recurrent.size());
    } else {
      bytes += sizeof(float) * static_cast<uint64_t>(position) *
               static_cast<uint64_t>(c_.kv_lora_rank + c_.qk_rope_head_dim);
    }
  }
  return bytes;
}

void ForwardPass::AppendState(std::vector<uint8_t>* out) const {
  out->reserve(out->size() + StateBytes(position_));
  Put(out, &position_, sizeof(position_));
  for (int64_t i = 0; i < c_.num_hidden_layers; ++i) {
    const auto li = static_cast<size_t>(i);
    if (c_.layer_kinds[li] == AttentionKind::kKda) {
      const KdaState& k = kda_[li];
      Put(out, k.conv_q.data(), k.conv_q.size() * sizeof(float));
      Put(out, k.conv_k.data(), k.conv_k.size() * sizeof(float));
      Put(out, k.conv_v.data(), k.conv_v.size() * sizeof(float));
      Put(out, k.recurrent.data(), k.recurrent.size() * sizeof(float));
    } else {
      const MlaCache& m = mla_[li];
      const auto rows = static_cast<size_t>(position_);
      Put(out, m.latent.data(), rows * static_cast<size_t>(c_.kv_lora_rank) * sizeof(float));
      Put(out, m.rope.data(), rows * static_cast<size_t>(c_.qk_rope_head_dim) * sizeof(float));
    }
  }
}

Result<size_t> ForwardPass::RestoreState(std::span<const uint8_t> bytes) {
  int64_t position = 0;
  if (bytes.size() < sizeof(position)) return Status::Error("session state: truncated header");
  std::memcpy(&position, bytes.data(), sizeof(position));
  if (position < 0 || position > capacity_) {
    return Status::Error("session state: position " + std::to_string(position) +
                         " is outside this session's context of " + std::to_string(capacity_));
  }
  const uint64_t need = StateBytes(position);
  if (bytes.size() < need) {
    return Status::Error("session state: " + std::to_string(bytes.size()) + " bytes, need " +
                         std::to_string(need) + " for position " + std::to_string(position));
  }
  size_t at = sizeof(position);
  auto take = [&](float* dst, size_t floats) {
    std::memcpy(dst, bytes.data() + at, floats * sizeof(float));
    at += floats * sizeof(float);
  };
  for (int64_t i = 0; i < c_.num_hidden_layers; ++i) {
    const auto li = static_cast<size_t>(i);
    if (c_.layer_kinds[li] == AttentionKind::kKda) {
      KdaState& k = kda_[li];
      take(k.conv_q.data(), k.conv_q.size());
      take(k.conv_k.data(), k.conv_k.size());
      take(k.conv_v.data(), k.conv_v.size());
      take(k.recurrent.data(), k.recurrent.size());
    } else {
      MlaCache& m = mla_[li];
      const auto rows = static_cast<size_t>(position);
      take(m.latent.data(), rows * static_cast<size_t>(c_.kv_lora_rank));
      take(m.rope.data(), rows * static_cast<size_t>(c_.qk_rope_head_dim));
      m.length = position;
    }
  }
  position_ = position;
  return at;
}

}  // namespace deltafin
