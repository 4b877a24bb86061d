#include "cli/plan_prefill_sample.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "cli/cli_util.h"
#include "deltafin/engine.h"
#include "modelgen/make_model.h"

namespace deltafin::cli {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

LayerCounts CountLayers(const json& tc) {
  LayerCounts n;
  n.layers = tc.value("num_hidden_layers", int64_t{0});
  const json& lin = tc.contains("linear_attn_config") ? tc["linear_attn_config"] : json::object();
  n.kda = lin.contains("kda_layers") ? static_cast<int64_t>(lin["kda_layers"].size()) : 0;
  n.mla = lin.contains("full_attn_layers") ? static_cast<int64_t>(lin["full_attn_layers"].size())
                                           : n.layers - n.kda;
  n.dense = std::clamp(tc.value("first_k_dense_replace", int64_t{1}), int64_t{0}, n.layers);
  n.moe = n.layers - n.dense;
  return n;
}

// "key=value" for every numeric or boolean field of the model's text_config (and of its
// linear_attn_config) that the preset's config also has, so the sample has the model's widths,
// expert count, top-k and routing. Fields the generator derives are left to it.
std::vector<std::string> SampleOverrides(const json& model_tc, const json& preset_tc,
                                         int64_t layers) {
  static const std::set<std::string> kDerived = {"num_hidden_layers", "bos_token_id",
                                                 "eos_token_id",      "pad_token_id",
                                                 "kda_layers",        "full_attn_layers"};
  std::vector<std::string> out;
  const auto add = [&](const json& from, const json& preset, const std::string& prefix) {
    for (auto it = from.begin(); it != from.end(); ++it) {
      const json& v = it.value();
      if (kDerived.count(it.key()) != 0 || !preset.contains(it.key())) continue;
      if (v.is_boolean() || v.is_number()) out.push_back(prefix + it.key() + "=" + v.dump());
    }
  };
  add(model_tc, preset_tc, "");
  if (model_tc.contains("linear_attn_config") && preset_tc.contains("linear_attn_config")) {
    add(model_tc["linear_attn_config"], preset_tc["linear_attn_config"], "linear_attn_config.");
  }
  out.push_back("num_hidden_layers=" + std::to_string(layers));
  return out;
}

double Ratio(int64_t model, int64_t sample) {
  return sample > 0 ? static_cast<double>(model) / static_cast<double>(sample) : 0.0;
}

}  // namespace

Result<PrefillSampler> PrefillSampler::Create(const std::string& config_text, int threads) {
  const json root = json::parse(config_text, nullptr, false);
  if (root.is_discarded()) return Status::Error("config.json is not JSON");
  const json& tc = TextConfigOf(root);
  PrefillSampler s;
  s.model_ = CountLayers(tc);
  s.threads_ = threads;
  s.vocab_ = tc.value("vocab_size", int64_t{0});
  if (s.model_.layers <= 0 || s.vocab_ <= 0) {
    return Status::Error("config.json has no num_hidden_layers or vocab_size");
  }
  // The dense layers, then four more: three KDA layers and an MLA one (K3's schedule), all MoE.
  const int64_t layers = std::min(s.model_.layers, s.model_.dense + 4);
  // Before generating anything: the sample's experts (MXFP4: half a byte a weight plus a scale
  // byte per 32) and its embedding and lm_head (BF16) must fit the sample's size.
  const auto field = [&](const char* key) {
    return static_cast<double>(tc.value(key, int64_t{0}));
  };
  const double expert_bytes =
      3 * field("moe_intermediate_size") * field("routed_expert_hidden_size") * (0.5 + 1.0 / 32);
  const double estimate =
      static_cast<double>(layers - s.model_.dense) * field("num_experts") * expert_bytes +
      2 * 2 * field("vocab_size") * field("hidden_size");
  if (estimate > static_cast<double>(kMaxSampleBytes)) {
    return Status::Error("a " + std::to_string(layers) + "-layer sample would be about " +
                         std::to_string(static_cast<int64_t>(estimate / (1 << 20))) +
                         " MiB (more than " + std::to_string(kMaxSampleBytes >> 20) + " MiB)");
  }
  DF_ASSIGN_OR_RETURN(const std::string preset_text, PresetConfigJson("bench", {}));
  const json preset = json::parse(preset_text);
  MakeModelOptions opts;
  opts.preset = "bench";
  opts.seed = 1;
  opts.fsync = false;
  opts.threads = threads;
  opts.overrides = SampleOverrides(tc, TextConfigOf(preset), layers);
  DF_ASSIGN_OR_RETURN(const std::string sample_text, PresetConfigJson(opts.preset, opts.overrides));
  s.sample_ = CountLayers(TextConfigOf(json::parse(sample_text)));
  if (s.sample_.moe == 0 && s.model_.moe > 0) {
    return Status::Error("a sample of " + std::to_string(layers) + " layers has no MoE layer");
  }
  DF_ASSIGN_OR_RETURN(const auto shards, PlanModelShards(opts));
  for (const ShardSummary& shard : shards) s.sample_bytes_ += shard.data_bytes;
  if (s.sample_bytes_ > kMaxSampleBytes) {
    return Status::Error("a " + std::to_string(layers) + "-layer sample would be " +
                         std::to_string(s.sample_bytes_ >> 20) + " MiB (more than " +
                         std::to_string(kMaxSampleBytes >> 20) + " MiB)");
  }
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl =
      (fs::path(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") / "deltafin-plan-sample-XXXXXX")
          .string();
  if (::mkdtemp(tmpl.data()) == nullptr) {
    return Status::Error("cannot create a temporary folder for the prefill sample (TMPDIR)");
  }
  s.dir_ = tmpl;
  opts.out_dir = s.dir_ + "/model";
  DF_RETURN_IF_ERROR(MakeModel(opts));
  return s;
}

Result<double> PrefillSampler::Seconds(int64_t prompt_tokens, int64_t wave) {
  const int64_t positions =
      std::min({prompt_tokens, std::max<int64_t>(wave, 1), kMaxSamplePositions});
  if (positions <= 0) return 0.0;
  EngineOptions o;
  o.model_dir = dir_ + "/model";
  o.experts = EngineOptions::Experts::kMapped;
  o.prefill_chunk = std::max<int64_t>(wave, 1);
  o.context_capacity = std::max<int64_t>(positions, 64);
  o.threads = threads_;
  DF_ASSIGN_OR_RETURN(auto engine, Engine::Load(o));
  auto session = engine->NewSession();
  const std::vector<int32_t> tokens = BenchPromptIds(positions, vocab_, 1);  // bench prefill's
  // A short warm-up (thread pool, first touches), then the measured prefill.
  DF_RETURN_IF_ERROR(
      session->Prefill(std::span(tokens).first(std::min<size_t>(16, tokens.size()))));
  session->Reset();
  session->ResetStats();
  DF_RETURN_IF_ERROR(session->Prefill(tokens));
  const SessionStats& st = session->stats();
  const double scale = static_cast<double>(prompt_tokens) / static_cast<double>(positions);
  const double kda = Ratio(model_.kda, sample_.kda), mla = Ratio(model_.mla, sample_.mla),
               moe = Ratio(model_.moe, sample_.moe), dense = Ratio(model_.dense, sample_.dense),
               all = Ratio(model_.layers, sample_.layers);
  double seconds = 0;
  for (size_t f = 0; f < kOpFamilyCount; ++f) {
    const auto family = static_cast<OpFamily>(f);
    double layers = all;
    switch (family) {
      case OpFamily::kKdaProjections:
      case OpFamily::kKdaConv:
      case OpFamily::kKdaRecurrence:
        layers = kda;
        break;
      case OpFamily::kMlaProjections:
      case OpFamily::kMlaAttention:
        layers = mla;
        break;
      case OpFamily::kRouter:
      case OpFamily::kRoutedExperts:
      case OpFamily::kSharedExperts:
      case OpFamily::kLatentProjections:
      case OpFamily::kExpertIoWait:
        layers = moe;
        break;
      case OpFamily::kDenseFfn:
        layers = dense;
        break;
      case OpFamily::kEmbedding:
      case OpFamily::kLmHead:
        layers = 1;
        break;
      case OpFamily::kSpineIoWait:  // mapped and in RAM: no reads to scale
        layers = 0;
        break;
      default:
        break;
    }
    // Work per position, except attention over the cache, which grows with the position.
    const double positions_scale = family == OpFamily::kMlaAttention ? scale * scale : scale;
    seconds += st.op_seconds[f] * layers * positions_scale;
  }
  return seconds;
}

PrefillSampler::PrefillSampler(PrefillSampler&& other) noexcept
    : model_(other.model_),
      sample_(other.sample_),
      sample_bytes_(other.sample_bytes_),
      threads_(other.threads_),
      vocab_(other.vocab_),
      dir_(std::move(other.dir_)) {
  other.dir_.clear();
}

PrefillSampler::~PrefillSampler() {
  std::error_code ec;
  if (!dir_.empty()) fs::remove_all(dir_, ec);
}

const json& TextConfigOf(const json& root) {
  return root.is_object() && root.contains("text_config") && root["text_config"].is_object()
             ? root["text_config"]
             : root;
}

}  // namespace deltafin::cli
