// Engine and Session: the public API of include/deltafin/engine.h over ModelWeights and
// ForwardPass.
#include "deltafin/engine.h"

#include <algorithm>
#include <utility>

#include "base/thread_pool.h"
#include "model/forward.h"
#include "model/weights.h"

namespace deltafin {

struct Engine::Impl {
  EngineOptions options;
  ModelInfo info;
  std::unique_ptr<ModelWeights> weights;
};

struct Session::Impl {
  explicit Impl(const ModelWeights& w, int64_t chunk, int64_t capacity)
      : forward(w, chunk, capacity), vocab(w.config.vocab_size) {
    logits.Resize(static_cast<size_t>(vocab));
  }
  ForwardPass forward;
  int64_t vocab;
  AlignedBuffer<float> logits;  // [vocab] of the last fed position
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

Result<std::unique_ptr<Engine>> Engine::Load(const EngineOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (options.prefill_chunk < 1) return Status::Error("prefill chunk must be >= 1");
  if (options.threads < 0) return Status::Error("threads must be >= 0");
  if (options.threads > 0) SetDefaultThreadCount(options.threads);
  // Decide the scale audit from the config before binding (binding is where it happens).
  DF_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(options.model_dir));
  BindOptions bind;
  const uint64_t all_expert_bytes = config.ExpertBytes() *
                                    static_cast<uint64_t>(config.num_experts) *
                                    static_cast<uint64_t>(config.num_moe_layers());
  switch (options.audit_expert_scales) {
    case EngineOptions::ScaleAudit::kOn:
      if (options.expert_fetcher != nullptr) {
        return Status::Error(
            "auditing every expert scale needs every expert on disk; this is a stream install "
            "(run `deltafin fetch-experts-all` first)");
      }
      bind.audit_expert_scales = true;
      break;
    case EngineOptions::ScaleAudit::kOff:
      bind.audit_expert_scales = false;
      break;
    case EngineOptions::ScaleAudit::kAuto:
      // A stream install's missing experts are holes: its fetcher checks each expert it fetches.
      bind.audit_expert_scales =
          all_expert_bytes <= (4ull << 30) && options.expert_fetcher == nullptr;
      break;
  }
  DF_ASSIGN_OR_RETURN(impl->weights,
                      ModelWeights::Load(options.model_dir, std::move(config), bind));
  const ModelConfig& c = impl->weights->config;
  int64_t capacity = options.context_capacity;
  if (capacity <= 0) capacity = std::min<int64_t>(c.max_position_embeddings, 4096);
  if (capacity > c.max_position_embeddings) {
    return Status::Error("context capacity " + std::to_string(capacity) +
                         " exceeds the model's max_position_embeddings " +
                         std::to_string(c.max_position_embeddings));
  }
  ModelInfo& info = impl->info;
  info.model_dir = options.model_dir;
  info.vocab_size = c.vocab_size;
  info.hidden_size = c.hidden_size;
  info.num_layers = c.num_hidden_layers;
  info.num_experts = c.num_experts;
  info.experts_per_token = c.num_experts_per_token;
  info.eos_token_id = c.eos_token_id;
  info.bos_token_id = c.bos_token_id;
  info.context_capacity = capacity;
  info.expert_bytes = c.ExpertBytes();
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

const ModelInfo& Engine::info() const { return impl_->info; }

std::unique_ptr<Session> Engine::NewSession() const {
  const int64_t chunk = std::min(impl_->options.prefill_chunk, impl_->info.context_capacity);
  auto impl = std::make_unique<Session::Impl>(*impl_->weights, chunk, impl_->info.context_capacity);
  impl->forward.SetExpertFetcher(impl_->options.expert_fetcher.get());
  return std::unique_ptr<Session>(new Session(std::move(impl)));
}

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() = default;

Status Session::Prefill(std::span<const int32_t> tokens, std::span<float> all_logits) {
  const auto vocab = static_cast<size_t>(impl_->vocab);
  if (tokens.empty()) return Status::Error("prefill needs at least one token");
  if (!all_logits.empty() && all_logits.size() != tokens.size() * vocab) {
    return Status::Error("all_logits must hold tokens.size() * vocab floats");
  }
  ForwardPass& f = impl_->forward;
  for (size_t begin = 0; begin < tokens.size();) {
    const size_t n = std::min(tokens.size() - begin, static_cast<size_t>(f.max_chunk()));
    if (!all_logits.empty()) {
      DF_RETURN_IF_ERROR(f.Run(tokens.data() + begin, static_cast<int64_t>(n), true,
                               all_logits.data() + begin * vocab));
    } else {
      DF_RETURN_IF_ERROR(
          f.Run(tokens.data() + begin, static_cast<int64_t>(n), false, impl_->logits.data()));
    }
    begin += n;
  }
  if (!all_logits.empty()) {
    std::copy_n(all_logits.data() + (tokens.size() - 1) * vocab, vocab, impl_->logits.data());
  }
  return Status::Ok();
}

Status Session::Decode(int32_t token) {
  return impl_->forward.Run(&token, 1, false, impl_->logits.data());
}

std::span<const float> Session::Logits() const { return impl_->logits.span(); }
int64_t Session::position() const { return impl_->forward.position(); }
void Session::Reset() { impl_->forward.Reset(); }
void Session::SetObserver(ForwardObserver* observer) { impl_->forward.SetObserver(observer); }
const SessionStats& Session::stats() const { return impl_->forward.stats(); }
void Session::ResetStats() { impl_->forward.ResetStats(); }

int32_t ArgmaxToken(std::span<const float> logits) {
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

}  // namespace deltafin
