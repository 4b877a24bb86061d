#include "weights/tensor_roster.h"

namespace deltafin {

std::string LayerTensorName(int64_t layer, const std::string& suffix) {
  return kLayerPrefix + std::to_string(layer) + "." + suffix;
}

std::string ExpertTensorName(int64_t layer, int64_t expert, const std::string& suffix) {
  return LayerTensorName(layer,
                         "block_sparse_moe.experts." + std::to_string(expert) + "." + suffix);
}

bool IsLinearRole(SpineRole role) {
  using R = SpineRole;
  switch (role) {
    case R::kLmHead:
    case R::kKdaQ:
    case R::kKdaK:
    case R::kKdaV:
    case R::kKdaFA:
    case R::kKdaFB:
    case R::kKdaB:
    case R::kKdaG:
    case R::kKdaO:
    case R::kMlaQA:
    case R::kMlaQB:
    case R::kMlaKvA:
    case R::kMlaG:
    case R::kMlaO:
    case R::kDenseGate:
    case R::kDenseUp:
    case R::kDenseDown:
    case R::kRouter:
    case R::kLatentDown:
    case R::kLatentUp:
    case R::kSharedGate:
    case R::kSharedUp:
    case R::kSharedDown:
      return true;
    default:
      return false;
  }
}

bool IsSpineMatrixRole(SpineRole role) { return IsLinearRole(role) || role == SpineRole::kMlaKvB; }

const char* SpineRoleName(SpineRole role) {
  using R = SpineRole;
  switch (role) {
    case R::kNone:
      return "none";
    case R::kEmbedding:
      return "embed_tokens";
    case R::kFinalNorm:
      return "norm";
    case R::kTailResNorm:
      return "output_attn_res_norm";
    case R::kTailResProj:
      return "output_attn_res_proj";
    case R::kLmHead:
      return "lm_head";
    case R::kInputNorm:
      return "input_layernorm";
    case R::kPostAttnNorm:
      return "post_attention_layernorm";
    case R::kAttnResNorm:
      return "self_attention_res_norm";
    case R::kMlpResNorm:
      return "mlp_res_norm";
    case R::kAttnResProj:
      return "self_attention_res_proj";
    case R::kMlpResProj:
      return "mlp_res_proj";
    case R::kKdaQ:
      return "kda.q_proj";
    case R::kKdaK:
      return "kda.k_proj";
    case R::kKdaV:
      return "kda.v_proj";
    case R::kKdaQConv:
      return "kda.q_conv1d";
    case R::kKdaKConv:
      return "kda.k_conv1d";
    case R::kKdaVConv:
      return "kda.v_conv1d";
    case R::kKdaFA:
      return "kda.f_a_proj";
    case R::kKdaFB:
      return "kda.f_b_proj";
    case R::kKdaDtBias:
      return "kda.dt_bias";
    case R::kKdaALog:
      return "kda.A_log";
    case R::kKdaB:
      return "kda.b_proj";
    case R::kKdaG:
      return "kda.g_proj";
    case R::kKdaONorm:
      return "kda.o_norm";
    case R::kKdaO:
      return "kda.o_proj";
    case R::kMlaQA:
      return "mla.q_a_proj";
    case R::kMlaQANorm:
      return "mla.q_a_layernorm";
    case R::kMlaQB:
      return "mla.q_b_proj";
    case R::kMlaKvA:
      return "mla.kv_a_proj";
    case R::kMlaKvANorm:
      return "mla.kv_a_layernorm";
    case R::kMlaKvB:
      return "mla.kv_b_proj";
    case R::kMlaG:
      return "mla.g_proj";
    case R::kMlaO:
      return "mla.o_proj";
    case R::kDenseGate:
      return "mlp.gate_proj";
    case R::kDenseUp:
      return "mlp.up_proj";
    case R::kDenseDown:
      return "mlp.down_proj";
    case R::kRouter:
      return "router";
    case R::kRouterBias:
      return "router.correction_bias";
    case R::kLatentDown:
      return "routed_expert_down_proj";
    case R::kLatentNorm:
      return "routed_expert_norm";
    case R::kLatentUp:
      return "routed_expert_up_proj";
    case R::kSharedGate:
      return "shared_experts.gate_proj";
    case R::kSharedUp:
      return "shared_experts.up_proj";
    case R::kSharedDown:
      return "shared_experts.down_proj";
  }
  return "unknown";
}

std::vector<TensorSpec> ExpertTensorSpecs(const ModelConfig& c, int64_t layer, int64_t expert) {
  const int64_t inter = c.moe_intermediate_size, latent = c.routed_expert_hidden_size;
  auto spec = [&](const char* suffix, int64_t rows, int64_t cols) {
    return TensorSpec{ExpertTensorName(layer, expert, suffix), DType::kU8, {rows, cols}};
  };
  return {spec("w1.weight_packed", inter, latent / 2), spec("w1.weight_scale", inter, latent / 32),
          spec("w2.weight_packed", latent, inter / 2), spec("w2.weight_scale", latent, inter / 32),
          spec("w3.weight_packed", inter, latent / 2), spec("w3.weight_scale", inter, latent / 32)};
}

std::vector<TensorSpec> GlobalTensorSpecs(const ModelConfig& c) {
  const int64_t h = c.hidden_size, v = c.vocab_size;
  using R = SpineRole;
  return {
      {"language_model.model.embed_tokens.weight", DType::kBF16, {v, h}, R::kEmbedding},
      {"language_model.model.norm.weight", DType::kBF16, {h}, R::kFinalNorm},
      {"language_model.model.output_attn_res_norm.weight", DType::kBF16, {h}, R::kTailResNorm},
      {"language_model.model.output_attn_res_proj.weight", DType::kBF16, {1, h}, R::kTailResProj},
      {"language_model.lm_head.weight", DType::kBF16, {v, h}, R::kLmHead},
  };
}

std::vector<TensorSpec> LayerTensorSpecs(const ModelConfig& c, int64_t layer) {
  const int64_t h = c.hidden_size;
  std::vector<TensorSpec> out;
  using R = SpineRole;
  auto add = [&](const std::string& suffix, DType dtype, std::vector<int64_t> shape, R role) {
    out.push_back({LayerTensorName(layer, suffix), dtype, std::move(shape), role});
  };
  add("input_layernorm.weight", DType::kBF16, {h}, R::kInputNorm);
  add("post_attention_layernorm.weight", DType::kBF16, {h}, R::kPostAttnNorm);
  add("self_attention_res_norm.weight", DType::kBF16, {h}, R::kAttnResNorm);
  add("mlp_res_norm.weight", DType::kBF16, {h}, R::kMlpResNorm);
  add("self_attention_res_proj.weight", DType::kBF16, {1, h}, R::kAttnResProj);
  add("mlp_res_proj.weight", DType::kBF16, {1, h}, R::kMlpResProj);

  if (c.layer_kinds[static_cast<size_t>(layer)] == AttentionKind::kKda) {
    const int64_t p = c.kda_width(), hd = c.kda_head_dim;
    // A_log is padded to a multiple of 128 entries (one real entry per head).
    const int64_t a_log = (c.kda_heads + 127) / 128 * 128;
    add("self_attn.q_proj.weight", DType::kBF16, {p, h}, R::kKdaQ);
    add("self_attn.k_proj.weight", DType::kBF16, {p, h}, R::kKdaK);
    add("self_attn.v_proj.weight", DType::kBF16, {p, h}, R::kKdaV);
    const int64_t k = c.conv_kernel_size;
    add("self_attn.q_conv1d.weight", DType::kF32, {p, 1, k}, R::kKdaQConv);
    add("self_attn.k_conv1d.weight", DType::kF32, {p, 1, k}, R::kKdaKConv);
    add("self_attn.v_conv1d.weight", DType::kF32, {p, 1, k}, R::kKdaVConv);
    add("self_attn.f_a_proj.weight", DType::kBF16, {hd, h}, R::kKdaFA);
    add("self_attn.f_b_proj.weight", DType::kBF16, {p, hd}, R::kKdaFB);
    add("self_attn.dt_bias", DType::kF32, {p}, R::kKdaDtBias);
    add("self_attn.A_log", DType::kF32, {a_log}, R::kKdaALog);
    add("self_attn.b_proj.weight", DType::kBF16, {c.kda_heads, h}, R::kKdaB);
    add("self_attn.g_proj.weight", DType::kBF16, {p, h}, R::kKdaG);
    add("self_attn.o_norm.weight", DType::kF32, {hd}, R::kKdaONorm);
    add("self_attn.o_proj.weight", DType::kBF16, {h, p}, R::kKdaO);
  } else {
    const int64_t nh = c.mla_heads;
    add("self_attn.q_a_proj.weight", DType::kBF16, {c.q_lora_rank, h}, R::kMlaQA);
    add("self_attn.q_a_layernorm.weight", DType::kBF16, {c.q_lora_rank}, R::kMlaQANorm);
    add("self_attn.q_b_proj.weight", DType::kBF16, {nh * c.mla_q_head_dim(), c.q_lora_rank},
        R::kMlaQB);
    add("self_attn.kv_a_proj_with_mqa.weight", DType::kBF16,
        {c.kv_lora_rank + c.qk_rope_head_dim, h}, R::kMlaKvA);
    add("self_attn.kv_a_layernorm.weight", DType::kBF16, {c.kv_lora_rank}, R::kMlaKvANorm);
    add("self_attn.kv_b_proj.weight", DType::kBF16,
        {nh * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank}, R::kMlaKvB);
    add("self_attn.g_proj.weight", DType::kBF16, {nh * c.v_head_dim, h}, R::kMlaG);
    add("self_attn.o_proj.weight", DType::kBF16, {h, nh * c.v_head_dim}, R::kMlaO);
  }

  if (!c.IsMoeLayer(layer)) {
    add("mlp.gate_proj.weight", DType::kBF16, {c.intermediate_size, h}, R::kDenseGate);
    add("mlp.up_proj.weight", DType::kBF16, {c.intermediate_size, h}, R::kDenseUp);
    add("mlp.down_proj.weight", DType::kBF16, {h, c.intermediate_size}, R::kDenseDown);
  } else {
    const int64_t latent = c.routed_expert_hidden_size, sw = c.shared_width();
    add("block_sparse_moe.gate.weight", DType::kBF16, {c.num_experts, h}, R::kRouter);
    add("block_sparse_moe.gate.e_score_correction_bias", DType::kF32, {c.num_experts},
        R::kRouterBias);
    add("block_sparse_moe.routed_expert_down_proj.weight", DType::kBF16, {latent, h},
        R::kLatentDown);
    if (c.latent_moe_use_norm) {
      add("block_sparse_moe.routed_expert_norm.weight", DType::kBF16, {latent}, R::kLatentNorm);
    }
    add("block_sparse_moe.routed_expert_up_proj.weight", DType::kBF16, {h, latent}, R::kLatentUp);
    add("block_sparse_moe.shared_experts.gate_proj.weight", DType::kBF16, {sw, h}, R::kSharedGate);
    add("block_sparse_moe.shared_experts.up_proj.weight", DType::kBF16, {sw, h}, R::kSharedUp);
    add("block_sparse_moe.shared_experts.down_proj.weight", DType::kBF16, {h, sw}, R::kSharedDown);
  }
  return out;
}

}  // namespace deltafin
