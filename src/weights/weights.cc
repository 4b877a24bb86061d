#include "weights/weights.h"

#include <cmath>
#include <unordered_map>
#include <utility>

#include "quant/bf16.h"
#include "quant/mxfp4.h"
#include "weights/tensor_roster.h"

namespace deltafin {

ExpertLayout ExpertLayout::For(const ModelConfig& c) {
  const uint64_t inter = static_cast<uint64_t>(c.moe_intermediate_size);
  const uint64_t latent = static_cast<uint64_t>(c.routed_expert_hidden_size);
  const uint64_t packed = inter * latent / 2, scale = inter * latent / 32;
  ExpertLayout l;
  l.w1_packed = 0;
  l.w1_scale = l.w1_packed + packed;
  l.w2_packed = l.w1_scale + scale;
  l.w2_scale = l.w2_packed + packed;
  l.w3_packed = l.w2_scale + scale;
  l.w3_scale = l.w3_packed + packed;
  l.bytes = l.w3_scale + scale;
  return l;
}

Status AuditExpertScales(const ModelConfig& c, const ExpertLayout& layout, const uint8_t* span,
                         int64_t layer, int64_t expert) {
  const uint64_t scale_bytes = layout.w2_packed - layout.w1_scale;
  const struct {
    const char* name;
    uint64_t offset;
  } scales[] = {{"w1.weight_scale", layout.w1_scale},
                {"w2.weight_scale", layout.w2_scale},
                {"w3.weight_scale", layout.w3_scale}};
  for (const auto& s : scales) {
    for (uint64_t i = 0; i < scale_bytes; ++i) {
      const uint8_t b = span[s.offset + i];
      if (b < kMinMxfp4Scale || b > kMaxMxfp4Scale) {
        const int64_t cols = std::string(s.name) == "w2.weight_scale"
                                 ? c.moe_intermediate_size / 32
                                 : c.routed_expert_hidden_size / 32;
        return Status::Error("tensor " + ExpertTensorName(layer, expert, s.name) + ": scale byte " +
                             std::to_string(b) + " at row " + std::to_string(i / cols) +
                             ", group " + std::to_string(i % cols) +
                             " is outside [2, 252] (E8M0 exponents the engine computes exactly)");
      }
    }
  }
  return Status::Ok();
}

namespace {

// Looks tensors up by roster name and checks dtype and shape; the first failure is kept. With a
// byte map, every spine tensor bound appends its row (`layer`: -1 for the global tensors).
class Binder {
 public:
  explicit Binder(const Checkpoint& ckpt, std::vector<SpineTensorEntry>* map = nullptr,
                  int64_t layer = -1)
      : ckpt_(ckpt), map_(map), layer_(layer) {}

  Status Bind(const std::vector<TensorSpec>& specs) {
    for (const auto& spec : specs) {
      const TensorRecord* rec = ckpt_.Find(spec.name);
      if (rec == nullptr) {
        return Status::Error(ckpt_.dir() + ": tensor " + spec.name + " is missing");
      }
      const std::string where =
          ckpt_.shard_paths()[static_cast<size_t>(rec->shard)] + ": tensor " + spec.name;
      if (rec->entry.dtype != spec.dtype) {
        return Status::Error(where + " has dtype " + std::string(DTypeName(rec->entry.dtype)) +
                             ", expected " + std::string(DTypeName(spec.dtype)));
      }
      if (rec->entry.shape != spec.shape) {
        return Status::Error(where + " has shape " + ShapeString(rec->entry.shape) + ", expected " +
                             ShapeString(spec.shape));
      }
      views_[spec.name] = ckpt_.View(*rec);
      if (map_ != nullptr && spec.role != SpineRole::kNone) {
        AppendSpineEntries({spec}, layer_, false, map_);
        map_->back().file = rec->shard;
        map_->back().offset = rec->file_offset;
        map_->back().bytes = rec->entry.end - rec->entry.begin;
      }
    }
    return Status::Ok();
  }
  const TensorView& Get(const std::string& name) const { return views_.at(name); }
  const TensorRecord& Record(const std::string& name) const { return *ckpt_.Find(name); }

 private:
  const Checkpoint& ckpt_;
  std::vector<SpineTensorEntry>* map_;
  int64_t layer_;
  std::unordered_map<std::string, TensorView> views_;
};

SpineMatrix Matrix(const TensorView& v) {
  return {reinterpret_cast<const uint16_t*>(v.data), v.Rows(), v.Cols()};
}

const float* F32(const TensorView& v) { return reinterpret_cast<const float*>(v.data); }

AlignedBuffer<float> WidenBf16(const TensorView& v) {
  AlignedBuffer<float> out(static_cast<size_t>(v.NumElements()));
  const auto* src = reinterpret_cast<const uint16_t*>(v.data);
  for (size_t i = 0; i < out.size(); ++i) out[i] = Bf16ToF32(src[i]);
  return out;
}

// The AttnRes pseudo-query w = norm_w ⊙ proj_w (docs/MODEL.md §4.3), folded once at load.
AlignedBuffer<float> ResQuery(const TensorView& norm, const TensorView& proj) {
  AlignedBuffer<float> w = WidenBf16(norm);
  const auto* p = reinterpret_cast<const uint16_t*>(proj.data);
  for (size_t i = 0; i < w.size(); ++i) w[i] *= Bf16ToF32(p[i]);
  return w;
}

Status BindKda(const ModelConfig& c, int64_t layer, const Binder& b, KdaWeights* k) {
  auto t = [&](const char* suffix) -> const TensorView& {
    return b.Get(LayerTensorName(layer, std::string("self_attn.") + suffix));
  };
  k->q_proj = Matrix(t("q_proj.weight"));
  k->k_proj = Matrix(t("k_proj.weight"));
  k->v_proj = Matrix(t("v_proj.weight"));
  k->q_conv = F32(t("q_conv1d.weight"));
  k->k_conv = F32(t("k_conv1d.weight"));
  k->v_conv = F32(t("v_conv1d.weight"));
  k->f_a_proj = Matrix(t("f_a_proj.weight"));
  k->f_b_proj = Matrix(t("f_b_proj.weight"));
  k->dt_bias = F32(t("dt_bias"));
  k->b_proj = Matrix(t("b_proj.weight"));
  k->g_proj = Matrix(t("g_proj.weight"));
  k->o_norm = F32(t("o_norm.weight"));
  k->o_proj = Matrix(t("o_proj.weight"));
  // A_log is per head (docs/MODEL.md §4.4, §6.3 #1): entries past the head count are padding and
  // must be 0.
  const TensorView& a_log = t("A_log");
  const float* a = F32(a_log);
  k->a_exp.Resize(static_cast<size_t>(c.kda_heads));
  for (int64_t h = 0; h < a_log.NumElements(); ++h) {
    if (h < c.kda_heads) {
      if (!std::isfinite(a[h])) {
        return Status::Error("tensor " + LayerTensorName(layer, "self_attn.A_log") + ": entry " +
                             std::to_string(h) + " is not finite");
      }
      k->a_exp[static_cast<size_t>(h)] = std::exp(a[h]);
    } else if (a[h] != 0.0f) {
      return Status::Error("tensor " + LayerTensorName(layer, "self_attn.A_log") +
                           ": padding entry " + std::to_string(h) + " is " + std::to_string(a[h]) +
                           ", expected 0 (A_log is per head; only the first " +
                           std::to_string(c.kda_heads) + " entries are used)");
    }
  }
  return Status::Ok();
}

void BindMla(int64_t layer, const Binder& b, MlaWeights* m) {
  auto t = [&](const char* suffix) -> const TensorView& {
    return b.Get(LayerTensorName(layer, std::string("self_attn.") + suffix));
  };
  m->q_a_proj = Matrix(t("q_a_proj.weight"));
  m->q_a_norm = WidenBf16(t("q_a_layernorm.weight"));
  m->q_b_proj = Matrix(t("q_b_proj.weight"));
  m->kv_a_proj = Matrix(t("kv_a_proj_with_mqa.weight"));
  m->kv_a_norm = WidenBf16(t("kv_a_layernorm.weight"));
  m->kv_b_proj = Matrix(t("kv_b_proj.weight"));
  m->g_proj = Matrix(t("g_proj.weight"));
  m->o_proj = Matrix(t("o_proj.weight"));
}

// Records each expert's span start after checking its six tensors are back to back in roster
// order, so one read fetches the whole expert.
Status BindExperts(const ModelConfig& c, const Checkpoint& ckpt, int64_t layer,
                   const ExpertLayout& layout, bool audit, MoeWeights* moe) {
  moe->expert_spans.resize(static_cast<size_t>(c.num_experts));
  moe->expert_offsets.resize(static_cast<size_t>(c.num_experts));
  int expert_shard = -1;
  for (int64_t e = 0; e < c.num_experts; ++e) {
    Binder b(ckpt);
    const auto specs = ExpertTensorSpecs(c, layer, e);
    DF_RETURN_IF_ERROR(b.Bind(specs));
    const TensorRecord& first = b.Record(specs[0].name);
    uint64_t expected = first.file_offset;
    for (const auto& spec : specs) {
      const TensorRecord& rec = b.Record(spec.name);
      if (rec.shard != first.shard || rec.file_offset != expected) {
        return Status::Error(ckpt.shard_paths()[static_cast<size_t>(rec.shard)] + ": tensor " +
                             spec.name +
                             " is not contiguous with the rest of its expert (the six expert "
                             "tensors must be back to back in w1/w2/w3 packed,scale order)");
      }
      expected += rec.entry.end - rec.entry.begin;
    }
    if (expert_shard >= 0 && first.shard != expert_shard) {
      return Status::Error(ckpt.shard_paths()[static_cast<size_t>(first.shard)] + ": expert " +
                           std::to_string(e) + " of layer " + std::to_string(layer) +
                           " is in a different shard from the layer's other experts");
    }
    expert_shard = first.shard;
    moe->expert_shard = first.shard;
    const uint8_t* span = b.Get(specs[0].name).data;
    if (audit) {
      DF_RETURN_IF_ERROR(AuditExpertScales(c, layout, span, layer, e)
                             .WithContext(ckpt.shard_paths()[static_cast<size_t>(first.shard)]));
    }
    moe->expert_spans[static_cast<size_t>(e)] = span;
    moe->expert_offsets[static_cast<size_t>(e)] = first.file_offset;
  }
  return Status::Ok();
}

Status BindLayer(const ModelConfig& c, const Checkpoint& ckpt, int64_t layer,
                 const ExpertLayout& layout, const BindOptions& options, LayerWeights* lw,
                 std::vector<SpineTensorEntry>* map) {
  Binder b(ckpt, map, layer);
  DF_RETURN_IF_ERROR(b.Bind(LayerTensorSpecs(c, layer)));
  auto t = [&](const std::string& suffix) -> const TensorView& {
    return b.Get(LayerTensorName(layer, suffix));
  };
  lw->kind = c.layer_kinds[static_cast<size_t>(layer)];
  lw->input_norm = WidenBf16(t("input_layernorm.weight"));
  lw->post_attn_norm = WidenBf16(t("post_attention_layernorm.weight"));
  lw->attn_res_query =
      ResQuery(t("self_attention_res_norm.weight"), t("self_attention_res_proj.weight"));
  lw->mlp_res_query = ResQuery(t("mlp_res_norm.weight"), t("mlp_res_proj.weight"));
  if (lw->kind == AttentionKind::kKda) {
    DF_RETURN_IF_ERROR(BindKda(c, layer, b, &lw->kda));
  } else {
    BindMla(layer, b, &lw->mla);
  }
  lw->is_moe = c.IsMoeLayer(layer);
  if (!lw->is_moe) {
    lw->dense = {Matrix(t("mlp.gate_proj.weight")), Matrix(t("mlp.up_proj.weight")),
                 Matrix(t("mlp.down_proj.weight"))};
    return Status::Ok();
  }
  MoeWeights& m = lw->moe;
  m.router = Matrix(t("block_sparse_moe.gate.weight"));
  m.correction_bias = F32(t("block_sparse_moe.gate.e_score_correction_bias"));
  m.latent_down = Matrix(t("block_sparse_moe.routed_expert_down_proj.weight"));
  if (c.latent_moe_use_norm)
    m.latent_norm = WidenBf16(t("block_sparse_moe.routed_expert_norm.weight"));
  m.latent_up = Matrix(t("block_sparse_moe.routed_expert_up_proj.weight"));
  m.shared = {Matrix(t("block_sparse_moe.shared_experts.gate_proj.weight")),
              Matrix(t("block_sparse_moe.shared_experts.up_proj.weight")),
              Matrix(t("block_sparse_moe.shared_experts.down_proj.weight"))};
  return BindExperts(c, ckpt, layer, layout, options.audit_expert_scales, &m);
}

}  // namespace

SpineMatrix* LayerMatrix(LayerWeights* lw, SpineRole role) {
  SpineMatrix* found = nullptr;
  ForEachSpineMatrix(*lw, [&](SpineMatrix& m, SpineRole r) {
    if (r == role) found = &m;
  });
  return found;
}

const std::string& ModelWeights::SpineFilePath(int file) const {
  const auto shards = checkpoint.shard_paths().size();
  const auto f = static_cast<size_t>(file);
  return f < shards ? checkpoint.shard_paths()[f] : int8_files[f - shards].path();
}

Result<std::unique_ptr<ModelWeights>> ModelWeights::Load(const std::string& model_dir,
                                                         const BindOptions& options) {
  DF_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(model_dir));
  return Load(model_dir, std::move(config), options);
}

Result<std::unique_ptr<ModelWeights>> ModelWeights::Load(const std::string& model_dir,
                                                         ModelConfig config,
                                                         const BindOptions& options) {
  auto w = std::make_unique<ModelWeights>();
  w->config = std::move(config);
  DF_ASSIGN_OR_RETURN(w->checkpoint, Checkpoint::Open(model_dir));
  const ModelConfig& c = w->config;
  w->expert_layout = ExpertLayout::For(c);

  Binder b(w->checkpoint, &w->spine_map);
  DF_RETURN_IF_ERROR(b.Bind(GlobalTensorSpecs(c)));
  w->embed_tokens =
      reinterpret_cast<const uint16_t*>(b.Get("language_model.model.embed_tokens.weight").data);
  w->final_norm = WidenBf16(b.Get("language_model.model.norm.weight"));
  w->tail_res_query = ResQuery(b.Get("language_model.model.output_attn_res_norm.weight"),
                               b.Get("language_model.model.output_attn_res_proj.weight"));
  w->lm_head = Matrix(b.Get("language_model.lm_head.weight"));

  w->layers.resize(static_cast<size_t>(c.num_hidden_layers));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    DF_RETURN_IF_ERROR(BindLayer(c, w->checkpoint, i, w->expert_layout, options,
                                 &w->layers[static_cast<size_t>(i)], &w->spine_map));
  }
  return w;
}

}  // namespace deltafin
