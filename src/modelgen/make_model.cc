// make-model implementation. Three stages: (1) build config.json from a preset plus overrides and
// validate it with the engine's own parser; (2) plan the shards from the shared tensor roster
// (non-expert tensors split below a size limit, then one shard per MoE layer's experts, each
// shard in writer order); (3) generate and write. Generation is a pure function of (seed, tensor
// name, byte offset), so worker threads fill 16 MiB chunks ahead of a single writer that consumes
// them in file order: output is independent of the thread count and runs at disk speed.
#include "modelgen/make_model.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <thread>

#include "base/aligned_buffer.h"
#include "format/checkpoint.h"
#include "format/safetensors.h"
#include "io/durable_file.h"
#include "modelgen/bpe_vocab.h"
#include "quant/bf16.h"
#include "quant/mxfp4.h"
#include "weights/config.h"
#include "weights/tensor_roster.h"

namespace deltafin {

namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

// safetensors data is little-endian; the generator stores native words with memcpy.
static_assert(std::endian::native == std::endian::little,
              "make-model assumes a little-endian host");

// ---------------------------------------------------------------------------------------------
// config.json
// ---------------------------------------------------------------------------------------------

// The numbers that differ between presets; everything else is K3's value (docs/MODEL.md §1).
struct PresetDims {
  int64_t vocab_size;
  int64_t hidden_size;
  int64_t intermediate_size;
  int64_t num_hidden_layers;
  int64_t max_position_embeddings;
  int64_t attn_res_block_size;
  int64_t mla_heads;
  int64_t q_lora_rank;
  int64_t kv_lora_rank;
  int64_t qk_nope_head_dim;
  int64_t qk_rope_head_dim;
  int64_t v_head_dim;
  int64_t kda_heads;
  int64_t num_experts;
  int64_t num_experts_per_token;
  int64_t moe_intermediate_size;
  int64_t routed_expert_hidden_size;
  int64_t num_expert_group;
  int64_t topk_group;
  // File layout: a fixed number of spine shards (0 = split below max_spine_shard_bytes), and
  // whether the checkpoint carries K3's vision tower and projector (in a shard of their own).
  int64_t spine_shards;
  bool vision;
};

// Spec §7 (k3-tiny-config.json) with a 768-rank vocabulary instead of K3's 163,584.
constexpr PresetDims kTiny = {.vocab_size = 1024,
                              .hidden_size = 256,
                              .intermediate_size = 640,
                              .num_hidden_layers = 9,
                              .max_position_embeddings = 8192,
                              .attn_res_block_size = 4,
                              .mla_heads = 4,
                              .q_lora_rank = 96,
                              .kv_lora_rank = 64,
                              .qk_nope_head_dim = 32,
                              .qk_rope_head_dim = 16,
                              .v_head_dim = 32,
                              .kda_heads = 4,
                              .num_experts = 64,
                              .num_experts_per_token = 4,
                              .moe_intermediate_size = 96,
                              .routed_expert_hidden_size = 128,
                              .num_expert_group = 4,
                              .topk_group = 2,
                              .spine_shards = 0,
                              .vision = false};

// docs/PERFORMANCE.md "Benchmark definitions": K3's structure and routing shape (93 layers, 896
// experts, top-16, groups 1/1), widths scaled down; ~17 GB of experts.
constexpr PresetDims kBench = {.vocab_size = 32768,
                               .hidden_size = 1024,
                               .intermediate_size = 4864,
                               .num_hidden_layers = 93,
                               .max_position_embeddings = 1048576,
                               .attn_res_block_size = 12,
                               .mla_heads = 8,
                               .q_lora_rank = 256,
                               .kv_lora_rank = 128,
                               .qk_nope_head_dim = 64,
                               .qk_rope_head_dim = 32,
                               .v_head_dim = 64,
                               .kda_heads = 8,
                               .num_experts = 896,
                               .num_experts_per_token = 16,
                               .moe_intermediate_size = 256,
                               .routed_expert_hidden_size = 512,
                               .num_expert_group = 1,
                               .topk_group = 1,
                               .spine_shards = 0,
                               .vision = false};

// Spec §1.2-1.3: K3's real text dimensions, and its real file layout (§2.1): 96 shards, i.e. the
// 113.5 GB spine in 3 shards, one shard per MoE layer's experts (92) and one of vision tensors.
// 1.56 TB: written sparse (MakeModelOptions::sparse) to test layout, I/O and memory plans.
constexpr PresetDims kK3 = {.vocab_size = 163840,
                            .hidden_size = 7168,
                            .intermediate_size = 33792,
                            .num_hidden_layers = 93,
                            .max_position_embeddings = 1048576,
                            .attn_res_block_size = 12,
                            .mla_heads = 96,
                            .q_lora_rank = 1536,
                            .kv_lora_rank = 512,
                            .qk_nope_head_dim = 128,
                            .qk_rope_head_dim = 64,
                            .v_head_dim = 128,
                            .kda_heads = 96,
                            .num_experts = 896,
                            .num_experts_per_token = 16,
                            .moe_intermediate_size = 3072,
                            .routed_expert_hidden_size = 3584,
                            .num_expert_group = 1,
                            .topk_group = 1,
                            .spine_shards = 3,
                            .vision = true};

const PresetDims* FindPreset(const std::string& name) {
  if (name == "tiny") return &kTiny;
  if (name == "bench") return &kBench;
  if (name == "k3") return &kK3;
  return nullptr;
}

// The vision tower and projector (docs/MODEL.md §2.1, §2.9: 165 vision_tower.* + 3 mm_projector.*
// tensors, about 0.8 GB). The text engine never reads them; their shapes are plausible (a 27-block
// ViT of width 1152 and MLP 4304, 14x14 patches, a 2x2-merge projector into the text width), not
// K3's published ones, which the spec does not pin.
constexpr int64_t kVisionWidth = 1152;
constexpr int64_t kVisionMlp = 4304;
constexpr int64_t kVisionBlocks = 27;

std::vector<TensorSpec> VisionTensorSpecs(int64_t text_hidden) {
  const int64_t w = kVisionWidth;
  std::vector<TensorSpec> v = {
      {"vision_tower.patch_embed.proj.weight", DType::kBF16, {w, 3, 14, 14}},
      {"vision_tower.patch_embed.proj.bias", DType::kBF16, {w}},
      {"vision_tower.patch_embed.pos_emb.weight", DType::kBF16, {64, 64, w}},
  };
  for (int64_t b = 0; b < kVisionBlocks; ++b) {
    const std::string p = "vision_tower.encoder.blocks." + std::to_string(b) + ".";
    v.push_back({p + "norm0.weight", DType::kBF16, {w}});
    v.push_back({p + "norm1.weight", DType::kBF16, {w}});
    v.push_back({p + "wqkv.weight", DType::kBF16, {3 * w, w}});
    v.push_back({p + "wo.weight", DType::kBF16, {w, w}});
    v.push_back({p + "mlp.fc0.weight", DType::kBF16, {kVisionMlp, w}});
    v.push_back({p + "mlp.fc1.weight", DType::kBF16, {w, kVisionMlp}});
  }
  v.push_back({"mm_projector.pre_norm.weight", DType::kBF16, {w}});
  v.push_back({"mm_projector.proj.0.weight", DType::kBF16, {4 * w, 4 * w}});
  v.push_back({"mm_projector.proj.2.weight", DType::kBF16, {text_hidden, 4 * w}});
  return v;
}

// Largest layer count an override may ask for; it only exists to keep a typo from allocating
// gigabytes of schedule lists before the config is validated.
constexpr int64_t kMaxLayers = 10000;

ordered_json QuantizationConfig() {
  ordered_json weights = {{"num_bits", 4},        {"type", "float"},
                          {"symmetric", true},    {"strategy", "group"},
                          {"group_size", 32},     {"dynamic", false},
                          {"observer", "minmax"}, {"scale_dtype", "torch.uint8"}};
  ordered_json group0 = {{"format", "mxfp4-pack-quantized"},
                         {"targets", {R"(re:.*block_sparse_moe\.experts\.\d+\.w[123]$)"}},
                         {"weights", weights},
                         {"input_activations", nullptr},
                         {"output_activations", nullptr}};
  return {{"quant_method", "compressed-tensors"},
          {"format", "mxfp4-pack-quantized"},
          {"quantization_status", "compressed"},
          {"config_groups", {{"group_0", group0}}},
          {"ignore", ordered_json::array()}};
}

// text_config in K3's field order; token ids and the layer schedule are filled in by
// SetDerivedFields once overrides have been applied.
ordered_json TextConfig(const PresetDims& d) {
  ordered_json t;
  t["model_type"] = "kimi_linear";
  t["architectures"] = {"KimiLinearForCausalLM"};
  t["dtype"] = "bfloat16";
  t["bos_token_id"] = 0;
  t["eos_token_id"] = 0;
  t["pad_token_id"] = 0;
  t["tie_word_embeddings"] = false;
  t["use_cache"] = true;
  t["vocab_size"] = d.vocab_size;
  t["hidden_size"] = d.hidden_size;
  t["intermediate_size"] = d.intermediate_size;
  t["num_hidden_layers"] = d.num_hidden_layers;
  t["max_position_embeddings"] = d.max_position_embeddings;
  t["rms_norm_eps"] = 1e-5;
  t["hidden_act"] = "situ";
  t["activation_situ_beta"] = 4.0;
  t["activation_situ_linear_beta"] = 25.0;
  t["num_nextn_predict_layers"] = 0;
  t["attn_res_block_size"] = d.attn_res_block_size;
  t["num_attention_heads"] = d.mla_heads;
  t["num_key_value_heads"] = d.mla_heads;
  t["q_lora_rank"] = d.q_lora_rank;
  t["kv_lora_rank"] = d.kv_lora_rank;
  t["qk_nope_head_dim"] = d.qk_nope_head_dim;
  t["qk_rope_head_dim"] = d.qk_rope_head_dim;
  t["v_head_dim"] = d.v_head_dim;
  t["mla_use_nope"] = true;
  t["mla_use_output_gate"] = true;
  t["linear_attn_config"] = {{"head_dim", 128},
                             {"num_heads", d.kda_heads},
                             {"short_conv_kernel_size", 4},
                             {"kda_layers", ordered_json::array()},
                             {"full_attn_layers", ordered_json::array()},
                             {"use_full_rank_gate", true},
                             {"gate_lower_bound", -5.0}};
  t["first_k_dense_replace"] = 1;
  t["moe_layer_freq"] = 1;
  t["num_experts"] = d.num_experts;
  t["num_experts_per_token"] = d.num_experts_per_token;
  t["num_shared_experts"] = 2;
  t["moe_intermediate_size"] = d.moe_intermediate_size;
  t["routed_expert_hidden_size"] = d.routed_expert_hidden_size;
  t["latent_moe_use_norm"] = true;
  t["moe_router_activation_func"] = "sigmoid";
  t["topk_method"] = "noaux_tc";
  t["use_grouped_topk"] = true;
  t["num_expert_group"] = d.num_expert_group;
  t["topk_group"] = d.topk_group;
  t["moe_renormalize"] = true;
  t["routed_scaling_factor"] = 1.0;
  t["quantization_config"] = QuantizationConfig();
  return t;
}

// Applies one "key=value" override to text_config. Only numeric and boolean fields can be set,
// and the value must have the field's type (an integer field takes an integer).
Status ApplyOverride(const std::string& text, ordered_json* tc, std::set<std::string>* touched) {
  auto fail = [&](const std::string& what) {
    return Status::Error("override '" + text + "': " + what);
  };
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0) return fail("expected key=value");
  const std::string key = text.substr(0, eq);
  const std::string value = text.substr(eq + 1);
  if (value.empty()) return fail("missing value after '='");

  ordered_json* obj = tc;
  std::string field = key;
  constexpr std::string_view kLinear = "linear_attn_config.";
  if (key.starts_with(kLinear)) {
    obj = &(*tc)["linear_attn_config"];
    field = key.substr(kLinear.size());
  }
  if (field == "bos_token_id" || field == "eos_token_id" || field == "pad_token_id") {
    return fail("text_config." + key + " is derived from vocab_size (first special id + offset)");
  }
  if (field == "kda_layers" || field == "full_attn_layers") {
    return fail("text_config." + key +
                " is derived from num_hidden_layers (K3 rule: layer i is MLA iff (i+1)%4==0 or it "
                "is the last)");
  }
  auto it = obj->find(field);
  if (field.empty() || it == obj->end()) {
    return fail("text_config has no field '" + key + "'");
  }
  ordered_json& target = *it;
  const char* first = value.data();
  const char* last = value.data() + value.size();
  if (target.is_boolean()) {
    if (value != "true" && value != "false") return fail(key + " must be true or false");
    target = value == "true";
  } else if (target.is_number_integer()) {
    int64_t v = 0;
    auto [end, ec] = std::from_chars(first, last, v);
    if (ec != std::errc() || end != last) return fail(key + " must be an integer");
    target = v;
  } else if (target.is_number_float()) {
    double v = 0;
    auto [end, ec] = std::from_chars(first, last, v);
    if (ec != std::errc() || end != last || !std::isfinite(v)) {
      return fail(key + " must be a finite number");
    }
    target = v;
  } else {
    return fail(key + " cannot be overridden (only numeric and boolean fields can)");
  }
  touched->insert(key);
  return Status::Ok();
}

// Sets the fields other fields determine: the KDA/MLA schedule (K3 rule, docs/MODEL.md §1.5) and
// the token ids (first special id S = vocab_size - 256; docs/MODEL.md §5.2 offsets).
Status SetDerivedFields(ordered_json* root, const std::set<std::string>& touched) {
  ordered_json& tc = (*root)["text_config"];
  if (touched.count("num_attention_heads") && !touched.count("num_key_value_heads")) {
    tc["num_key_value_heads"] = tc["num_attention_heads"];  // K3 MLA has no GQA
  }
  const int64_t layers = tc["num_hidden_layers"].get<int64_t>();
  if (layers < 1 || layers > kMaxLayers) {
    return Status::Error("text_config.num_hidden_layers must be in 1.." +
                         std::to_string(kMaxLayers) + ", got " + std::to_string(layers));
  }
  ordered_json kda = ordered_json::array(), mla = ordered_json::array();
  for (int64_t i = 0; i < layers; ++i) {
    const bool is_mla = (i + 1) % 4 == 0 || i == layers - 1;
    (is_mla ? mla : kda).push_back(i + 1);  // the config's lists are one-based
  }
  tc["linear_attn_config"]["kda_layers"] = std::move(kda);
  tc["linear_attn_config"]["full_attn_layers"] = std::move(mla);

  const int64_t vocab = tc["vocab_size"].get<int64_t>();
  if (vocab < 256 + kNumSpecialTokens) {
    return Status::Error("text_config.vocab_size must be at least " +
                         std::to_string(256 + kNumSpecialTokens) +
                         " (256 byte ranks + 256 special ids), got " + std::to_string(vocab));
  }
  const int64_t first_special = vocab - kNumSpecialTokens;
  for (ordered_json* obj : {root, &tc}) {
    (*obj)["bos_token_id"] = first_special + kBosOffset;
    (*obj)["eos_token_id"] = first_special + kEosOffset;
    (*obj)["pad_token_id"] = first_special + kPadOffset;
  }
  (*root)["media_placeholder_token_id"] = first_special + kMediaPlaceholderOffset;
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// Deterministic weights
// ---------------------------------------------------------------------------------------------

uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The i-th output of splitmix64 started at `seed`: random access, so any byte range of any tensor
// can be produced independently (and in parallel) with identical results.
inline uint64_t Draw(uint64_t seed, uint64_t i) {
  return Mix64(seed + (i + 1) * 0x9E3779B97F4A7C15ull);
}

uint64_t TensorSeed(uint64_t seed, std::string_view name) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a of the name
  for (char ch : name) h = (h ^ static_cast<unsigned char>(ch)) * 0x100000001B3ull;
  return Mix64(h ^ Mix64(seed + 0x6D616B652D6D6Full));
}

// Approximately standard normal from one draw: the sum of four 16-bit uniforms (Irwin-Hall, n = 4)
// shifted and scaled to mean 0, variance 1. Bounded by ±3.46, which is what a random init wants,
// and much cheaper than Box-Muller for the ~1 G spine elements of `bench`.
inline float NormalFromBits(uint64_t r) {
  const int64_t sum =
      static_cast<int64_t>((r & 0xFFFF) + ((r >> 16) & 0xFFFF) + ((r >> 32) & 0xFFFF) + (r >> 48));
  constexpr float kScale = 1.7320508f / 65536.0f;  // sqrt(3) / 2^16: unit variance
  return static_cast<float>(sum - 131070) * kScale;
}

// Uniform in [0, 1) from the top 24 bits (exact in fp32).
inline float UnitFromBits(uint64_t r) { return static_cast<float>(r >> 40) * 0x1p-24f; }

struct Init {
  enum Kind : uint8_t { kNormal, kUniform, kALog } kind = kNormal;
  float a = 0;               // kNormal: std; kUniform: low
  float b = 0;               // kUniform: high
  int64_t real_entries = 0;  // kALog: entries before the zero padding (= KDA heads)
};

bool EndsWith(std::string_view s, std::string_view suffix) { return s.ends_with(suffix); }

// How each non-expert tensor is initialised, decided by its name (the roster's vocabulary).
Result<Init> InitFor(const TensorSpec& spec, const ModelConfig& c) {
  const std::string& n = spec.name;
  auto normal = [](double std_dev) {
    return Init{Init::kNormal, static_cast<float>(std_dev), 0, 0};
  };
  // Vision tensors are never read by the text engine; any small init will do.
  if (n.starts_with("vision_tower.") || n.starts_with("mm_projector.")) return normal(0.02);
  auto uniform = [](float lo, float hi) { return Init{Init::kUniform, lo, hi, 0}; };
  if (EndsWith(n, "embed_tokens.weight")) return normal(1.0);
  // Every RMSNorm weight (layer norms, AttnRes norms, LoRA norms, o_norm, latent norm, final).
  if (EndsWith(n, "norm.weight")) return uniform(0.9f, 1.1f);
  // AttnRes pseudo-queries: depth-mixing scores of O(1), so the softmax is neither uniform nor
  // one-hot.
  if (EndsWith(n, "res_proj.weight")) return normal(1.0 / std::sqrt(double(spec.shape.back())));
  if (EndsWith(n, "self_attn.A_log")) return Init{Init::kALog, 0, 0, c.kda_heads};
  if (EndsWith(n, "self_attn.dt_bias")) return normal(0.1);
  if (EndsWith(n, "conv1d.weight")) return normal(0.5);
  if (EndsWith(n, "e_score_correction_bias")) return uniform(-0.01f, 0.01f);
  // Linear W[out, in] (projections, router, lm_head): N(0, 1/in) keeps outputs at the input's RMS.
  if (EndsWith(n, ".weight") && spec.shape.size() == 2) {
    return normal(1.0 / std::sqrt(double(spec.shape[1])));
  }
  return Status::Error("make-model: no initialiser for tensor '" + n + "'");
}

// Writes elements [first, last) of a tensor as F32 or BF16, value(i) giving element i.
template <typename ValueFn>
void EmitElements(DType dtype, uint64_t first, uint64_t last, uint8_t* dst, ValueFn value) {
  if (dtype == DType::kF32) {
    for (uint64_t i = first; i < last; ++i, dst += 4) {
      const float v = value(i);
      std::memcpy(dst, &v, 4);
    }
  } else {
    for (uint64_t i = first; i < last; ++i, dst += 2) {
      const uint16_t v = F32ToBf16(value(i));
      std::memcpy(dst, &v, 2);
    }
  }
}

// Fills bytes [byte_begin, byte_end) (element-aligned) of a non-expert tensor.
void FillSpineBytes(const Init& init, DType dtype, uint64_t seed, uint64_t byte_begin,
                    uint64_t byte_end, uint8_t* dst) {
  const uint64_t es = DTypeSize(dtype);
  const uint64_t first = byte_begin / es, last = byte_end / es;
  switch (init.kind) {
    case Init::kNormal: {
      const float std_dev = init.a;
      EmitElements(dtype, first, last, dst,
                   [&](uint64_t i) { return std_dev * NormalFromBits(Draw(seed, i)); });
      break;
    }
    case Init::kUniform: {
      const float lo = init.a, span = init.b - init.a;
      EmitElements(dtype, first, last, dst,
                   [&](uint64_t i) { return lo + span * UnitFromBits(Draw(seed, i)); });
      break;
    }
    case Init::kALog:
      // exp(A_log[h]) uniform in [0.6, 2.7] for the real heads (the range seen in K3); the
      // padding entries are exactly 0, as in the real checkpoint (docs/MODEL.md §2.4).
      EmitElements(dtype, first, last, dst, [&](uint64_t i) {
        if (static_cast<int64_t>(i) >= init.real_entries) return 0.0f;
        return static_cast<float>(std::log(0.6 + 2.1 * double(UnitFromBits(Draw(seed, i)))));
      });
      break;
  }
}

// MXFP4 packed bytes: uniformly random E2M1 nibbles, 16 per draw (docs/MODEL.md §3.2 layout needs
// nothing else: any byte is two valid codes).
void FillPackedBytes(uint64_t seed, uint64_t begin, uint64_t end, uint8_t* dst) {
  uint64_t i = begin;
  for (; i < end && (i & 7) != 0; ++i) {
    *dst++ = static_cast<uint8_t>(Draw(seed, i >> 3) >> (8 * (i & 7)));
  }
  for (; i + 8 <= end; i += 8, dst += 8) {
    const uint64_t r = Draw(seed, i >> 3);
    std::memcpy(dst, &r, 8);
  }
  for (; i < end; ++i) *dst++ = static_cast<uint8_t>(Draw(seed, i >> 3) >> (8 * (i & 7)));
}

// Scale bytes of one MXFP4 matrix with `cols` inputs. Uniform random codes have
// E[code^2] = (0 + .25 + 1 + 2.25 + 4 + 9 + 16 + 36) / 8 = 8.5625, so the dequantised weight has
// E[w^2] = 8.5625 * 4^(s-127). Each group picks `low` or `low + 1` with the probability that makes
// E[w^2] = 1/cols exactly, i.e. RMS 1/sqrt(cols) like the BF16 linears.
struct ScalePlan {
  uint8_t low = 127;
  uint32_t threshold = 0;  // a random byte below this selects low + 1
};

ScalePlan PlanScales(int64_t cols) {
  const double target = 1.0 / (8.5625 * double(cols));  // wanted E[4^(s-127)]
  int exp = static_cast<int>(std::floor(std::log(target) / std::log(4.0)));
  double p = (target / std::pow(4.0, exp) - 1.0) / 3.0;  // P(s = low+1) for the exact mean
  // Keep every byte inside [kMinMxfp4Scale, kMaxMxfp4Scale] (the exact range of the fast kernels).
  const int low = std::clamp(exp + 127, int{kMinMxfp4Scale}, int{kMaxMxfp4Scale} - 1);
  if (low != exp + 127) p = 0;
  ScalePlan plan;
  plan.low = static_cast<uint8_t>(low);
  plan.threshold = static_cast<uint32_t>(std::lround(std::clamp(p, 0.0, 1.0) * 256.0));
  return plan;
}

void FillScaleBytes(uint64_t seed, const ScalePlan& plan, uint64_t begin, uint64_t end,
                    uint8_t* dst) {
  for (uint64_t i = begin; i < end; ++i) {
    const uint32_t byte = static_cast<uint32_t>(Draw(seed, i >> 3) >> (8 * (i & 7))) & 0xFF;
    *dst++ = static_cast<uint8_t>(plan.low + (byte < plan.threshold ? 1 : 0));
  }
}

// ---------------------------------------------------------------------------------------------
// Shard plan
// ---------------------------------------------------------------------------------------------

// Data is produced and written in chunks of this size; big enough for efficient writes, small
// enough that a few in flight per thread cost little memory.
constexpr uint64_t kChunkBytes = 16ull << 20;

struct SpineTensor {
  TensorSpec spec;
  Init init;
  uint64_t seed = 0;
  uint64_t offset = 0;  // inside the shard's data section
  uint64_t bytes = 0;
};

// Where each of an expert's six tensors lies inside its span, and how to generate it.
struct ExpertPart {
  std::string suffix;  // "w1.weight_packed", ...
  uint64_t offset = 0;
  uint64_t bytes = 0;
  bool is_scale = false;
  ScalePlan scales;
};

struct ShardPlan {
  std::string file_name;
  std::string kind;  // "spine", "experts" or "vision"
  uint64_t data_bytes = 0;
  std::vector<SpineTensor> spine;     // non-expert shards, in file order
  int64_t expert_layer = -1;          // expert shards: the MoE layer whose experts they hold
  std::vector<int64_t> expert_order;  // expert ids in file (lexicographic name) order
};

struct ModelPlan {
  ModelConfig config;
  uint64_t seed = 0;
  std::vector<ExpertPart> expert_parts;  // the six parts of every expert span
  uint64_t expert_bytes = 0;
  std::vector<ShardPlan> shards;
};

// Common writers order a shard by (dtype width descending, name): F32, BF16, then U8.
bool FileOrderLess(const TensorSpec& a, const TensorSpec& b) {
  const size_t wa = DTypeSize(a.dtype), wb = DTypeSize(b.dtype);
  if (wa != wb) return wa > wb;
  return a.name < b.name;
}

std::string ShardFileName(int index, int total) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05d-of-%06d.safetensors", index, total);
  return buf;
}

uint64_t SpecBytes(const TensorSpec& s) {
  uint64_t n = DTypeSize(s.dtype);
  for (int64_t d : s.shape) n *= static_cast<uint64_t>(d);
  return n;
}

// Sorts one layer's expert tensor names the way the writer orders a shard and returns the expert
// ids in that order. It also checks what the engine relies on (docs/MODEL.md §2.8): each expert's
// six tensors come out adjacent and in roster order, so an expert is one contiguous span.
Result<std::vector<int64_t>> ExpertFileOrder(const ModelConfig& c, int64_t layer) {
  struct Entry {
    std::string name;
    int64_t expert;
    int part;
  };
  std::vector<Entry> entries;
  entries.reserve(static_cast<size_t>(c.num_experts) * 6);
  for (int64_t e = 0; e < c.num_experts; ++e) {
    const auto specs = ExpertTensorSpecs(c, layer, e);
    for (size_t k = 0; k < specs.size(); ++k) {
      entries.push_back({specs[k].name, e, static_cast<int>(k)});
    }
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.name < b.name; });
  std::vector<int64_t> order;
  for (size_t i = 0; i < entries.size(); i += 6) {
    for (size_t k = 0; k < 6; ++k) {
      if (entries[i + k].expert != entries[i].expert ||
          entries[i + k].part != static_cast<int>(k)) {
        return Status::Error("make-model: sorting the tensor names of layer " +
                             std::to_string(layer) +
                             " does not keep each expert's six tensors together in roster order");
      }
    }
    order.push_back(entries[i].expert);
  }
  return order;
}

Result<ModelPlan> PlanModel(const ModelConfig& config, const PresetDims& dims,
                            const MakeModelOptions& opts) {
  ModelPlan plan;
  plan.config = config;
  plan.seed = opts.seed;
  const ModelConfig& c = plan.config;

  // Expert span layout, from the roster's six specs (same for every expert).
  if (c.num_moe_layers() > 0) {
    uint64_t offset = 0;
    for (const TensorSpec& s : ExpertTensorSpecs(c, c.first_k_dense_replace, 0)) {
      ExpertPart part;
      part.suffix = s.name.substr(s.name.rfind(".w") + 1);
      part.offset = offset;
      part.bytes = SpecBytes(s);
      part.is_scale = part.suffix.ends_with("weight_scale");
      // Scale columns = inputs / 32, so the matrix's input count is cols * 32.
      if (part.is_scale) part.scales = PlanScales(s.shape[1] * kMxfp4GroupSize);
      offset += part.bytes;
      plan.expert_parts.push_back(std::move(part));
    }
    plan.expert_bytes = offset;
  }

  // Non-expert tensors in roster order (embeddings, layers, final norms and head), split greedily
  // into shards that stay below the limit; a shard never splits a tensor.
  std::vector<TensorSpec> spine;
  const auto globals = GlobalTensorSpecs(c);
  spine.push_back(globals.front());  // embed_tokens first; norms, tail AttnRes, lm_head last
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    for (auto& s : LayerTensorSpecs(c, layer)) spine.push_back(std::move(s));
  }
  spine.insert(spine.end(), globals.begin() + 1, globals.end());

  // A preset with a fixed spine shard count splits it into that many shards of about equal size.
  uint64_t limit = opts.max_spine_shard_bytes;
  if (dims.spine_shards > 0) {
    uint64_t spine_bytes = 0;
    for (const TensorSpec& s : spine) spine_bytes += SpecBytes(s);
    const uint64_t n = static_cast<uint64_t>(dims.spine_shards);
    limit = (spine_bytes + n - 1) / n;
  }
  // How each non-expert tensor is generated: a pure function of the seed and its name.
  auto make_tensor = [&](TensorSpec spec) -> Result<SpineTensor> {
    SpineTensor t;
    DF_ASSIGN_OR_RETURN(t.init, InitFor(spec, c));
    t.bytes = SpecBytes(spec);
    t.seed = TensorSeed(opts.seed, spec.name);
    t.spec = std::move(spec);
    return t;
  };
  std::vector<std::vector<SpineTensor>> spine_shards(1);
  uint64_t current = 0;
  for (TensorSpec& s : spine) {
    DF_ASSIGN_OR_RETURN(SpineTensor t, make_tensor(std::move(s)));
    const bool room_for_more =
        dims.spine_shards <= 0 || static_cast<int64_t>(spine_shards.size()) < dims.spine_shards;
    if (!spine_shards.back().empty() && current + t.bytes > limit && room_for_more) {
      spine_shards.emplace_back();
      current = 0;
    }
    current += t.bytes;
    spine_shards.back().push_back(std::move(t));
  }
  std::vector<SpineTensor> vision;
  if (dims.vision) {
    for (TensorSpec& s : VisionTensorSpecs(c.hidden_size)) {
      DF_ASSIGN_OR_RETURN(SpineTensor t, make_tensor(std::move(s)));
      vision.push_back(std::move(t));
    }
  }

  const int total =
      static_cast<int>(spine_shards.size() + c.num_moe_layers() + (vision.empty() ? 0 : 1));
  int index = 0;
  // Tensors in writer order, offsets assigned.
  auto tensor_shard = [&](std::vector<SpineTensor> tensors, const char* kind) {
    std::sort(tensors.begin(), tensors.end(), [](const SpineTensor& a, const SpineTensor& b) {
      return FileOrderLess(a.spec, b.spec);
    });
    ShardPlan shard;
    shard.file_name = ShardFileName(++index, total);
    shard.kind = kind;
    for (SpineTensor& t : tensors) {
      t.offset = shard.data_bytes;
      shard.data_bytes += t.bytes;
    }
    shard.spine = std::move(tensors);
    plan.shards.push_back(std::move(shard));
  };
  for (auto& tensors : spine_shards) tensor_shard(std::move(tensors), "spine");
  // One shard per MoE layer's experts, like K3 (and the bench README): a layer's experts form one
  // contiguous run of num_experts * expert_bytes.
  for (int64_t layer = c.first_k_dense_replace; layer < c.num_hidden_layers; ++layer) {
    ShardPlan shard;
    shard.file_name = ShardFileName(++index, total);
    shard.kind = "experts";
    shard.expert_layer = layer;
    DF_ASSIGN_OR_RETURN(shard.expert_order, ExpertFileOrder(c, layer));
    shard.data_bytes = static_cast<uint64_t>(c.num_experts) * plan.expert_bytes;
    plan.shards.push_back(std::move(shard));
  }
  // Vision last, in a shard of its own.
  if (!vision.empty()) tensor_shard(std::move(vision), "vision");
  return plan;
}

// Sanity bound on the configured sizes so a typo ("hidden_size=10000000") is refused with a clear
// message instead of overflowing byte counts.
Status CheckPlanSize(const ModelConfig& c) {
  auto too_big = [](const TensorSpec& s) {
    unsigned __int128 n = DTypeSize(s.dtype);
    for (int64_t d : s.shape) n *= static_cast<uint64_t>(d);
    return n > (static_cast<unsigned __int128>(1) << 46);  // 64 TiB
  };
  // Bound every width first: the roster multiplies them in int64.
  constexpr int64_t kMaxDim = int64_t{1} << 24;
  const std::pair<const char*, int64_t> dims[] = {
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_attention_heads", c.mla_heads},
      {"q_lora_rank", c.q_lora_rank},
      {"kv_lora_rank", c.kv_lora_rank},
      {"qk_nope_head_dim", c.qk_nope_head_dim},
      {"qk_rope_head_dim", c.qk_rope_head_dim},
      {"v_head_dim", c.v_head_dim},
      {"linear_attn_config.num_heads", c.kda_heads},
      {"linear_attn_config.head_dim", c.kda_head_dim},
      {"linear_attn_config.short_conv_kernel_size", c.conv_kernel_size},
      {"num_experts", c.num_experts},
      {"num_shared_experts", c.num_shared_experts},
      {"moe_intermediate_size", c.moe_intermediate_size},
      {"routed_expert_hidden_size", c.routed_expert_hidden_size},
  };
  for (const auto& [field, value] : dims) {
    if (value > kMaxDim) {
      return Status::Error("make-model: text_config." + std::string(field) + " = " +
                           std::to_string(value) + " is absurdly large (limit " +
                           std::to_string(kMaxDim) + ")");
    }
  }
  std::vector<TensorSpec> specs = GlobalTensorSpecs(c);
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    for (auto& s : LayerTensorSpecs(c, layer)) specs.push_back(std::move(s));
  }
  for (const auto& s : specs) {
    if (too_big(s)) {
      return Status::Error("make-model: tensor '" + s.name + "' would be absurdly large");
    }
  }
  return Status::Ok();
}

// Fills bytes [begin, end) of a shard's data section.
void FillShardRange(const ModelPlan& plan, const ShardPlan& shard, uint64_t begin, uint64_t end,
                    uint8_t* dst) {
  if (shard.expert_layer < 0) {
    auto it = std::upper_bound(shard.spine.begin(), shard.spine.end(), begin,
                               [](uint64_t off, const SpineTensor& t) { return off < t.offset; });
    for (--it; it != shard.spine.end() && it->offset < end; ++it) {
      const uint64_t b = std::max(begin, it->offset);
      const uint64_t e = std::min(end, it->offset + it->bytes);
      if (b >= e) continue;
      FillSpineBytes(it->init, it->spec.dtype, it->seed, b - it->offset, e - it->offset,
                     dst + (b - begin));
    }
    return;
  }
  const uint64_t eb = plan.expert_bytes;
  for (uint64_t pos = begin / eb; pos * eb < end; ++pos) {
    const int64_t expert = shard.expert_order[pos];
    const uint64_t span = pos * eb;
    for (const ExpertPart& part : plan.expert_parts) {
      const uint64_t start = span + part.offset;
      const uint64_t b = std::max(begin, start), e = std::min(end, start + part.bytes);
      if (b >= e) continue;
      const uint64_t seed =
          TensorSeed(plan.seed, ExpertTensorName(shard.expert_layer, expert, part.suffix));
      if (part.is_scale) {
        FillScaleBytes(seed, part.scales, b - start, e - start, dst + (b - begin));
      } else {
        FillPackedBytes(seed, b - start, e - start, dst + (b - begin));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Parallel generation, in-order writing
// ---------------------------------------------------------------------------------------------

// Generator threads fill fixed-size chunk buffers ahead of one writing thread, which consumes
// chunks strictly in order. Chunk i lives in slot i % slots; a worker may start chunk i only once
// chunk i - slots has been written, so memory stays at slots * kChunkBytes however large the model.
class ChunkPipeline {
 public:
  using FillFn = std::function<void(size_t chunk, uint8_t* dst)>;

  ChunkPipeline(size_t num_chunks, int workers, FillFn fill)
      : num_chunks_(num_chunks), slots_(static_cast<size_t>(workers) + 2), fill_(std::move(fill)) {
    buffers_.reserve(slots_);
    for (size_t i = 0; i < slots_; ++i) buffers_.emplace_back(kChunkBytes);
    ready_.assign(slots_, 0);
    for (int w = 0; w < workers; ++w) threads_.emplace_back([this] { Work(); });
  }
  ChunkPipeline(const ChunkPipeline&) = delete;
  ChunkPipeline& operator=(const ChunkPipeline&) = delete;
  ~ChunkPipeline() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    free_cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  // Blocks until chunk i (the next unwritten one) is filled.
  const uint8_t* Wait(size_t i) {
    std::unique_lock<std::mutex> lock(mu_);
    ready_cv_.wait(lock, [&] { return ready_[i % slots_] == i + 1; });
    return buffers_[i % slots_].data();
  }
  // Chunk i has been written; its slot may be refilled.
  void Release(size_t i) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      released_ = i + 1;
    }
    free_cv_.notify_all();
  }

 private:
  void Work() {
    for (;;) {
      size_t i;
      {
        std::unique_lock<std::mutex> lock(mu_);
        free_cv_.wait(lock,
                      [&] { return stop_ || next_ >= num_chunks_ || next_ < released_ + slots_; });
        if (stop_ || next_ >= num_chunks_) return;
        i = next_++;
      }
      fill_(i, buffers_[i % slots_].data());
      {
        std::lock_guard<std::mutex> lock(mu_);
        ready_[i % slots_] = i + 1;
      }
      ready_cv_.notify_all();
    }
  }

  const size_t num_chunks_;
  const size_t slots_;
  const FillFn fill_;
  std::vector<AlignedBuffer<uint8_t>> buffers_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable free_cv_, ready_cv_;
  std::vector<size_t> ready_;  // per slot: 1 + the chunk it holds, once filled
  size_t next_ = 0;            // next chunk to hand to a worker
  size_t released_ = 0;        // chunks fully written
  bool stop_ = false;
};

// ---------------------------------------------------------------------------------------------
// Output files
// ---------------------------------------------------------------------------------------------

constexpr std::string_view kPartialSuffix = ".partial";

// Files written under "<name>.partial" and renamed into place only by Commit(), in the order they
// were added (config.json is added last, so a directory with config.json holds a whole model).
// Destroying an uncommitted set removes its temporary files.
class StagedFiles {
 public:
  StagedFiles(fs::path dir, bool sync) : dir_(std::move(dir)), sync_(sync) {}
  StagedFiles(const StagedFiles&) = delete;
  StagedFiles& operator=(const StagedFiles&) = delete;
  ~StagedFiles() {
    if (committed_) return;
    std::error_code ec;
    for (const auto& name : names_) fs::remove(TempPath(name), ec);
  }

  // Registers `name` and returns the temporary path to write it to.
  std::string Add(const std::string& name) {
    names_.push_back(name);
    return TempPath(name);
  }

  Status WriteText(const std::string& name, const std::string& text) {
    return WriteFileContents(Add(name), text.data(), text.size(), sync_);
  }

  // Call once a file added with Add() has been written and closed.
  Status Finished(const std::string& path) { return sync_ ? SyncPath(path) : Status::Ok(); }

  Status Commit(MakeModelSummary* summary) {
    for (const auto& name : names_) {
      std::error_code ec;
      const fs::path final_path = dir_ / name;
      fs::rename(TempPath(name), final_path, ec);
      if (ec)
        return Status::Error(final_path.string() + ": cannot rename into place: " + ec.message());
      summary->files.push_back(name);
      const uintmax_t size = fs::file_size(final_path, ec);
      if (ec) return Status::Error(final_path.string() + ": cannot stat: " + ec.message());
      summary->total_bytes += size;
    }
    committed_ = true;
    // Make the renames themselves durable.
    return sync_ ? SyncPath(dir_.string()) : Status::Ok();
  }

 private:
  std::string TempPath(const std::string& name) const {
    return (dir_ / (name + std::string(kPartialSuffix))).string();
  }

  fs::path dir_;
  bool sync_;
  std::vector<std::string> names_;
  bool committed_ = false;
};

// Names a previous make-model run (or an HF download) puts in a model directory; --force removes
// exactly these and leaves anything else alone.
bool IsModelFileName(const std::string& name) {
  static const std::set<std::string> kFixed = {
      "config.json",    "generation_config.json", "model.safetensors.index.json",
      "tiktoken.model", "tokenizer_config.json",  "model.safetensors"};
  int index = 0, total = 0;
  return kFixed.count(name) > 0 || ParseShardName(name, &index, &total) ||
         name.ends_with(kPartialSuffix);
}

Status PrepareOutDir(const std::string& out_dir, bool force) {
  const fs::path dir(out_dir);
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (!fs::exists(st)) {
    fs::create_directories(dir, ec);
    if (ec) return Status::Error(out_dir + ": cannot create directory: " + ec.message());
    return Status::Ok();
  }
  if (!fs::is_directory(st)) return Status::Error(out_dir + ": exists and is not a directory");
  const bool empty = fs::is_empty(dir, ec);
  if (ec) return Status::Error(out_dir + ": cannot list: " + ec.message());
  if (empty) return Status::Ok();
  if (!force) {
    return Status::Error(out_dir + " is not empty; pass --force to replace the model files in it");
  }
  // config.json goes first: from then on the directory no longer looks like a complete model.
  fs::remove(dir / "config.json", ec);
  if (ec) return Status::Error(out_dir + "/config.json: cannot remove: " + ec.message());
  std::vector<fs::path> doomed;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file(ec) && IsModelFileName(it->path().filename().string())) {
      doomed.push_back(it->path());
    }
  }
  if (ec) return Status::Error(out_dir + ": cannot list: " + ec.message());
  for (const auto& p : doomed) {
    fs::remove(p, ec);
    if (ec) return Status::Error(p.string() + ": cannot remove: " + ec.message());
  }
  return Status::Ok();
}

int WorkerCount(int requested) {
  if (requested > 0) return std::min(requested, 256);
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(std::min(hw, 64u));
}

// The safetensors declarations of one shard, in file order.
std::vector<SafetensorsWriter::Declaration> ShardDeclarations(const ModelPlan& plan,
                                                              const ShardPlan& shard) {
  std::vector<SafetensorsWriter::Declaration> decls;
  if (shard.expert_layer < 0) {
    for (const SpineTensor& t : shard.spine)
      decls.push_back({t.spec.name, t.spec.dtype, t.spec.shape});
    return decls;
  }
  decls.reserve(shard.expert_order.size() * 6);
  for (int64_t e : shard.expert_order) {
    for (TensorSpec& s : ExpertTensorSpecs(plan.config, shard.expert_layer, e)) {
      decls.push_back({std::move(s.name), s.dtype, std::move(s.shape)});
    }
  }
  return decls;
}

// Generates and writes every shard, recording each tensor's shard in `weight_map`.
Status WriteShards(const ModelPlan& plan, const MakeModelOptions& opts, StagedFiles* files,
                   nlohmann::json* weight_map) {
  struct Chunk {
    size_t shard;
    uint64_t begin, end;
  };
  std::vector<Chunk> chunks;
  uint64_t total_bytes = 0;
  for (size_t s = 0; s < plan.shards.size(); ++s) {
    const uint64_t n = plan.shards[s].data_bytes;
    for (uint64_t b = 0; b < n; b += kChunkBytes) {
      chunks.push_back({s, b, std::min(n, b + kChunkBytes)});
    }
    total_bytes += n;
  }
  // Sparse: no data is generated; every shard's data section is one hole.
  std::unique_ptr<ChunkPipeline> pipeline;
  if (!opts.sparse) {
    pipeline = std::make_unique<ChunkPipeline>(
        chunks.size(), WorkerCount(opts.threads), [&](size_t i, uint8_t* dst) {
          const Chunk& c = chunks[i];
          FillShardRange(plan, plan.shards[c.shard], c.begin, c.end, dst);
        });
  }

  using Clock = std::chrono::steady_clock;
  auto last_report = Clock::now();
  uint64_t written = 0;
  size_t next_chunk = 0;
  for (const ShardPlan& shard : plan.shards) {
    const auto decls = ShardDeclarations(plan, shard);
    for (const auto& d : decls) (*weight_map)[d.name] = shard.file_name;
    const std::string path = files->Add(shard.file_name);
    SafetensorsWriter writer;
    DF_RETURN_IF_ERROR(writer.Open(path, decls));
    if (opts.sparse) {
      DF_RETURN_IF_ERROR(writer.Skip(shard.data_bytes));
      written += shard.data_bytes;
    }
    for (;
         pipeline && next_chunk < chunks.size() && &plan.shards[chunks[next_chunk].shard] == &shard;
         ++next_chunk) {
      const Chunk& c = chunks[next_chunk];
      const uint8_t* data = pipeline->Wait(next_chunk);
      DF_RETURN_IF_ERROR(writer.Append(data, c.end - c.begin));
      pipeline->Release(next_chunk);
      written += c.end - c.begin;
      if (opts.progress && Clock::now() - last_report >= std::chrono::seconds(1)) {
        opts.progress(written, total_bytes);
        last_report = Clock::now();
      }
    }
    DF_RETURN_IF_ERROR(writer.Close());
    DF_RETURN_IF_ERROR(files->Finished(path));
  }
  if (opts.progress) opts.progress(written, total_bytes);
  return Status::Ok();
}

uint64_t PlannedBytes(const ModelPlan& plan) {
  uint64_t n = 0;
  for (const auto& s : plan.shards) n += s.data_bytes;
  return n;
}

}  // namespace

std::vector<std::string> MakeModelPresets() { return {"tiny", "bench", "k3"}; }

Result<std::string> PresetConfigJson(const std::string& preset,
                                     const std::vector<std::string>& overrides) {
  const PresetDims* dims = FindPreset(preset);
  if (dims == nullptr) {
    return Status::Error("unknown preset '" + preset + "' (known: tiny, bench, k3)");
  }
  ordered_json root;
  root["architectures"] = {"KimiK3ForConditionalGeneration"};
  root["model_type"] = "kimi_k3";
  root["dtype"] = "bfloat16";
  root["bos_token_id"] = 0;
  root["eos_token_id"] = 0;
  root["pad_token_id"] = 0;
  root["media_placeholder_token_id"] = 0;
  root["tie_word_embeddings"] = false;
  root["text_config"] = TextConfig(*dims);
  if (dims->vision) {
    root["vision_config"] = {{"model_type", "kimi_k3_vision"},
                             {"hidden_size", kVisionWidth},
                             {"intermediate_size", kVisionMlp},
                             {"num_hidden_layers", kVisionBlocks},
                             {"patch_size", 14},
                             {"merge_kernel_size", {2, 2}},
                             {"note", "generated by deltafin make-model: plausible shapes"}};
  } else {
    root["vision_config"] = {{"model_type", "kimi_k3_vision"},
                             {"note", "generated by deltafin make-model: no vision tensors"}};
  }
  std::set<std::string> touched;
  for (const std::string& o : overrides) {
    DF_RETURN_IF_ERROR(ApplyOverride(o, &root["text_config"], &touched));
  }
  DF_RETURN_IF_ERROR(SetDerivedFields(&root, touched));
  std::string text = root.dump(2) + "\n";
  auto parsed = ParseModelConfig(text, "preset '" + preset + "'");
  if (!parsed.ok()) return parsed.status();
  return text;
}

namespace {

// What make-model would write for these options: config.json's text and the shard plan.
struct PlannedModel {
  std::string config_text;
  ModelPlan plan;
};

Result<PlannedModel> PlanFromOptions(const MakeModelOptions& opts) {
  PlannedModel out;
  DF_ASSIGN_OR_RETURN(out.config_text, PresetConfigJson(opts.preset, opts.overrides));
  DF_ASSIGN_OR_RETURN(const ModelConfig config,
                      ParseModelConfig(out.config_text, "make-model config"));
  DF_RETURN_IF_ERROR(CheckPlanSize(config));
  DF_ASSIGN_OR_RETURN(out.plan, PlanModel(config, *FindPreset(opts.preset), opts));
  return out;
}

}  // namespace

Result<std::vector<ShardSummary>> PlanModelShards(const MakeModelOptions& opts) {
  DF_ASSIGN_OR_RETURN(const PlannedModel planned, PlanFromOptions(opts));
  const ModelPlan& plan = planned.plan;
  std::vector<ShardSummary> out;
  for (const ShardPlan& shard : plan.shards) {
    ShardSummary s;
    s.file_name = shard.file_name;
    s.data_bytes = shard.data_bytes;
    s.tensors = shard.expert_layer >= 0 ? shard.expert_order.size() * plan.expert_parts.size()
                                        : shard.spine.size();
    s.kind = shard.kind;
    out.push_back(std::move(s));
  }
  return out;
}

Status MakeModel(const MakeModelOptions& opts, MakeModelSummary* summary) {
  const auto start = std::chrono::steady_clock::now();
  if (opts.out_dir.empty()) return Status::Error("make-model: no output directory given");
  DF_ASSIGN_OR_RETURN(const PlannedModel planned, PlanFromOptions(opts));
  const std::string& config_text = planned.config_text;
  const ModelPlan& plan = planned.plan;
  const ModelConfig& config = plan.config;
  DF_RETURN_IF_ERROR(PrepareOutDir(opts.out_dir, opts.force));

  // Refuse up front rather than fail after writing most of a large model. A sparse model needs
  // only its headers and index (about 150 MB for k3).
  std::error_code ec;
  const fs::space_info space = fs::space(opts.out_dir, ec);
  const uint64_t needed = (opts.sparse ? 0 : PlannedBytes(plan)) + (256ull << 20);
  if (!ec && space.available < needed) {
    return Status::Error(opts.out_dir + ": needs about " + std::to_string(needed >> 20) +
                         " MiB but only " + std::to_string(space.available >> 20) +
                         " MiB are free");
  }

  const int64_t first_special = config.vocab_size - kNumSpecialTokens;
  DF_ASSIGN_OR_RETURN(const std::vector<std::string> tokens, BuildBpeVocab(first_special));

  StagedFiles files(opts.out_dir, opts.fsync);
  nlohmann::json weight_map = nlohmann::json::object();  // std::map inside: sorted by name
  DF_RETURN_IF_ERROR(WriteShards(plan, opts, &files, &weight_map));
  nlohmann::ordered_json index;
  index["metadata"] = {{"total_size", PlannedBytes(plan)}};  // tensor bytes, as HF counts them
  index["weight_map"] = weight_map;  // json -> ordered_json: a conversion, not a move

  DF_RETURN_IF_ERROR(files.WriteText("tiktoken.model", TiktokenModelText(tokens)));
  DF_RETURN_IF_ERROR(files.WriteText(
      "tokenizer_config.json", TokenizerConfigJson(first_special, config.max_position_embeddings)));
  nlohmann::ordered_json generation = {{"bos_token_id", config.bos_token_id},
                                       {"eos_token_id", config.eos_token_id}};
  DF_RETURN_IF_ERROR(files.WriteText("generation_config.json", generation.dump(2) + "\n"));
  DF_RETURN_IF_ERROR(files.WriteText("model.safetensors.index.json", index.dump(2) + "\n"));
  DF_RETURN_IF_ERROR(files.WriteText("config.json", config_text));  // last: marks completion

  MakeModelSummary local;
  MakeModelSummary* out = summary != nullptr ? summary : &local;
  *out = MakeModelSummary{};
  DF_RETURN_IF_ERROR(files.Commit(out));
  out->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return Status::Ok();
}

}  // namespace deltafin
