// Engine and Session: the public API of include/deltafin/engine.h over ModelWeights and
// ForwardPass.
#include "deltafin/engine.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <utility>

#include "base/byte_size.h"
#include "base/thread_pool.h"
#include "kernels/matvec.h"
#include "model/forward.h"
#include "model/mla.h"
#include "model/reserved_bytes.h"
#include "weights/drive_set.h"
#include "weights/expert_source.h"
#include "weights/expert_streamer.h"
#include "weights/io_scheduler.h"
#include "weights/memory_plan.h"
#include "weights/placement.h"
#include "weights/read_probe.h"
#include "weights/spine_int8.h"
#include "weights/spine_pages.h"
#include "weights/spine_ring.h"
#include "weights/tensor_roster.h"
#include "weights/weights.h"

namespace deltafin {

struct Engine::Impl {
  EngineOptions options;
  ModelInfo info;
  std::unique_ptr<ModelWeights> weights;
  // Every read of a streamed spine and of streamed experts, by priority (weights/io_scheduler.h).
  // Declared before its queues, so it is destroyed after they detach.
  std::unique_ptr<IoScheduler> io_scheduler;
  // Streamed experts: one cache for all sessions, which therefore run one at a time.
  std::unique_ptr<ExpertStreamer> streamer;
  // The streamer's reader when the model is spread over several drives (owned by the streamer).
  DriveSetReader* drives = nullptr;
  std::mutex stream_mutex;
  // A spine that does not fit: one ring for all sessions (they run one at a time, under
  // stream_mutex, since a streamed spine implies streamed experts).
  std::unique_ptr<SpineRing> spine_ring;
};

struct Session::Impl {
  explicit Impl(const ModelWeights& w, int64_t chunk, int64_t capacity, int64_t verify_rows,
                KdaRollbackMode rollback)
      : forward(w, std::max(chunk, verify_rows), capacity, verify_rows, rollback),
        vocab(w.config.vocab_size),
        prefill_chunk(chunk) {
    logits.Resize(static_cast<size_t>(vocab));
  }
  ForwardPass forward;
  // A stream install's expert sources for this session: the fetcher in front, and the mapped
  // spans behind it when the experts are not streamed.
  std::unique_ptr<MappedExperts> mapped_experts;
  std::unique_ptr<FetchingExperts> fetching_experts;
  int64_t vocab;
  int64_t prefill_chunk;                // positions per prefill Run (max_chunk may be larger)
  const float* pending_rows = nullptr;  // logits rows of the pending Verify
  AlignedBuffer<float> logits;          // [vocab] of the last fed position
  std::mutex* stream_mutex = nullptr;   // held during a forward pass when experts stream
  const std::atomic<bool>* interrupt = nullptr;  // SetInterrupt: checked by Prefill's passes
};

namespace {

// Floats one position of a prefill wave (or verify row) adds to a session's working buffers
// (forward.cc, kda.cc, mla.cc, moe.cc reserve these per position), from the config.
int64_t SessionFloatsPerPosition(const ModelConfig& c) {
  const int64_t p = c.kda_width(), h = c.hidden_size, k = c.num_experts_per_token;
  const int64_t anchors = (c.num_hidden_layers - 1) / c.attn_res_block_size + 1;
  const int64_t width = std::max(c.intermediate_size, c.shared_width());
  return h * (anchors + 6) + 7 * p + c.kda_head_dim + c.kda_heads + c.q_lora_rank +
         c.mla_heads * (c.mla_q_head_dim() + 2 * c.v_head_dim) + c.kv_lora_rank +
         c.qk_rope_head_dim + 2 * width + c.num_experts + 5 * k +
         c.routed_expert_hidden_size * (4 + k) + 2 * c.moe_intermediate_size;
}

// One session's recurrent state, latent cache and working buffers for passes of `chunk`
// positions, computed from the config with a margin for small buffers.
uint64_t SessionBytes(const ModelConfig& c, int64_t chunk, int64_t capacity, int64_t verify_rows,
                      KdaRollbackMode rollback) {
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  const int64_t p = c.kda_width();
  uint64_t floats = 0;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    if (c.layer_kinds[static_cast<size_t>(i)] == AttentionKind::kKda) {
      floats += u(c.kda_heads * c.kda_head_dim * c.kda_head_dim + 3 * p * c.conv_kernel_size);
    } else {
      floats += u(capacity * (c.kv_lora_rank + c.qk_rope_head_dim));
    }
  }
  floats += u(std::max(chunk, verify_rows) * SessionFloatsPerPosition(c) + 2 * c.vocab_size +
              MlaScratchFixedFloats(c, capacity, DefaultThreadCount()) + 4 * c.num_experts);
  // Speculative verification: per-row rollback data, and replay's copy of the state.
  uint64_t rollback_bytes = 0;
  if (verify_rows > 0) {
    const int64_t state = c.kda_heads * c.kda_head_dim * c.kda_head_dim;
    rollback_bytes = u(verify_rows) * KdaRollback::BytesPerRow(c, rollback) +
                     (rollback == KdaRollbackMode::kReplay ? u(state) * 4 : 0) +
                     u(3 * (c.conv_kernel_size - 1) * p) * 4;
    rollback_bytes *=
        u(std::count(c.layer_kinds.begin(), c.layer_kinds.end(), AttentionKind::kKda));
  }
  return floats * 4 + rollback_bytes + (32ull << 20);
}

// The smallest planned wave: today's fixed chunk, which every budget that ran before still holds.
constexpr int64_t kSmallestWave = 32;

int64_t VerifyRows(const EngineOptions& o) { return o.max_draft > 0 ? o.max_draft + 1 : 0; }
KdaRollbackMode RollbackMode(const EngineOptions& o) {
  return o.rollback == EngineOptions::Rollback::kSnapshot ? KdaRollbackMode::kSnapshot
                                                          : KdaRollbackMode::kReplay;
}

// `chunk`: a fixed --prefill-chunk, or 0 for a planned wave. `spine`: the byte map's rows from
// the config (SpineTensorTable, in the runtime format).
Result<MemoryPlan> PlanFor(const EngineOptions& o, const ModelConfig& c,
                           const std::vector<SpineTensorEntry>& spine, int64_t chunk,
                           int64_t capacity) {
  MemoryNeeds needs;
  // The ring's groups: one per decoder layer, then the lm_head.
  needs.spine_groups.assign(static_cast<size_t>(c.num_hidden_layers) + 1, 0);
  for (const SpineTensorEntry& e : spine) {
    const uint64_t bytes = ResidentBytes(e);
    needs.spine_bytes += bytes;
    if (e.layer >= 0) {
      needs.spine_groups[static_cast<size_t>(e.layer)] += bytes;
    } else if (e.role == SpineRole::kLmHead) {
      needs.spine_groups.back() += bytes;
    }
  }
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    needs.largest_layer_spine =
        std::max(needs.largest_layer_spine, needs.spine_groups[static_cast<size_t>(l)]);
  }
  needs.spine_ring_depth = o.spine_readahead + 1;
  needs.all_expert_bytes = c.ExpertBytes() * static_cast<uint64_t>(c.num_experts) *
                           static_cast<uint64_t>(c.num_moe_layers());
  needs.wave_fixed = chunk > 0;
  needs.wave_min = chunk > 0 ? chunk : std::min(kSmallestWave, capacity);
  needs.wave_max = chunk > 0 ? chunk : capacity;
  needs.session_bytes = SessionBytes(c, needs.wave_min, capacity, VerifyRows(o), RollbackMode(o));
  needs.session_bytes_per_position = static_cast<uint64_t>(SessionFloatsPerPosition(c)) * 4;
  needs.min_expert_cache = ExpertStreamer::MinCacheBytes(c, o.io_threads);
  MemoryBudget budget;
  if (o.mem_limit > 0) {
    budget = {o.mem_limit, "--mem-limit"};
  } else {
    DF_ASSIGN_OR_RETURN(budget, MachineMemoryBudget());
  }
  const auto placement = o.experts == EngineOptions::Experts::kMapped ? ExpertPlacement::kMapped
                         : o.experts == EngineOptions::Experts::kStreamed
                             ? ExpertPlacement::kStreamed
                             : ExpertPlacement::kAuto;
  return PlanMemory(needs, budget, placement, o.expert_cache_bytes);
}

}  // namespace

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

namespace {

// Everything Load decides from config.json alone: the model's shape, the context capacity and
// the memory plan. Load fails here, before any weight is read, when the budget is too small.
struct LoadPlan {
  ModelInfo info;
  MemoryPlan memory;
};

// The context a session holds: --ctx, or min(the config's limit, 4096).
Result<int64_t> ContextCapacity(const EngineOptions& options, const ModelConfig& c) {
  int64_t capacity = options.context_capacity;
  if (capacity <= 0) capacity = std::min<int64_t>(c.max_position_embeddings, 4096);
  if (capacity > c.max_position_embeddings) {
    return Status::Error("context capacity " + std::to_string(capacity) +
                         " exceeds the model's max_position_embeddings " +
                         std::to_string(c.max_position_embeddings));
  }
  return capacity;
}

Status CheckOptions(const EngineOptions& options) {
  if (options.prefill_chunk < 0) {
    return Status::Error("prefill chunk must be >= 1 (or 0: the planned wave)");
  }
  if (options.threads < 0) return Status::Error("threads must be >= 0");
  if (options.spine_readahead < 0 || options.spine_readahead > 15) {
    return Status::Error("spine readahead must be in [0, 15] layers");
  }
  if (options.max_draft < 0 || options.max_draft > 64) {
    return Status::Error("max draft must be in [0, 64]");
  }
  return Status::Ok();
}

// The work of one decode step and of a prompt token (ModelInfo's workload fields), summed over
// the byte map's rows.
void AddWorkload(const ModelConfig& c, const std::vector<SpineTensorEntry>& spine,
                 ModelInfo* info) {
  // Decode reads every spine tensor but the embedding table, of which it reads one row (BF16).
  info->num_moe_layers = c.num_moe_layers();
  info->spine_bytes_per_token = info->spine_bytes + static_cast<uint64_t>(c.hidden_size) * 2;
  int64_t products = 0;
  for (const SpineTensorEntry& e : spine) {
    if (e.role == SpineRole::kEmbedding) info->spine_bytes_per_token -= ResidentBytes(e);
    // What runs after a layer's routed experts, before the next layer's lookahead is issued.
    if (e.role == SpineRole::kLmHead || e.role == SpineRole::kLatentUp) {
      info->unoverlapped_spine_bytes_per_token += ResidentBytes(e);
    }
    // One kernel call a step per linear matrix; MLA's kv_b_proj is two small products per head
    // inside the attention. The [1, H] AttnRes projections are folded into the mixes.
    if (IsLinearRole(e.role)) ++products;
    if (e.role == SpineRole::kMlaKvB) products += 2 * c.mla_heads;
    (e.role == SpineRole::kLmHead ? info->lm_head_macs : info->linear_macs_per_token) +=
        MatrixMacs(e);
    // The lookahead reads one more router a step; counted at its checkpoint (BF16) size.
    if (e.role == SpineRole::kRouter && info->router_bytes == 0) {
      info->router_bytes =
          static_cast<uint64_t>(e.rows) * static_cast<uint64_t>(e.cols) * DTypeSize(e.dtype);
    }
  }
  info->spine_products_per_token = products;
  const auto kda_layers =
      std::count(c.layer_kinds.begin(), c.layer_kinds.end(), AttentionKind::kKda);
  info->recurrent_state_bytes =
      static_cast<uint64_t>(kda_layers * c.kda_heads * c.kda_head_dim * c.kda_head_dim) * 4;
  // The routed experts a token runs (top-k per MoE layer: W1, W3 [inter, latent], W2 [latent,
  // inter]), the KDA recurrence (decay, k·S, the rank-1 update and q·S: 4·d² per head) and MLA's
  // absorbed attention per cached position (scores over lora + rope, the context over lora).
  info->linear_macs_per_token +=
      static_cast<uint64_t>(c.num_moe_layers() * c.num_experts_per_token * 3 *
                            c.moe_intermediate_size * c.routed_expert_hidden_size);
  info->kda_macs_per_token =
      static_cast<uint64_t>(kda_layers * c.kda_heads * 4 * c.kda_head_dim * c.kda_head_dim);
  info->mla_macs_per_cached_position = static_cast<uint64_t>(
      (c.num_hidden_layers - kda_layers) * c.mla_heads * (2 * c.kv_lora_rank + c.qk_rope_head_dim));
}

// ModelInfo's shape and workload: everything that does not depend on the memory budget.
Result<ModelInfo> MakeShape(const EngineOptions& options, const ModelConfig& c,
                            const std::vector<SpineTensorEntry>& spine) {
  DF_RETURN_IF_ERROR(CheckOptions(options));
  ModelInfo info;
  DF_ASSIGN_OR_RETURN(info.context_capacity, ContextCapacity(options, c));
  info.model_dir = options.model_dir;
  info.vocab_size = c.vocab_size;
  info.hidden_size = c.hidden_size;
  info.num_layers = c.num_hidden_layers;
  info.num_experts = c.num_experts;
  info.experts_per_token = c.num_experts_per_token;
  info.eos_token_id = c.eos_token_id;
  info.bos_token_id = c.bos_token_id;
  info.expert_bytes = c.ExpertBytes();
  info.spine_int8 = options.spine_int8;
  for (const SpineTensorEntry& e : spine) info.spine_bytes += ResidentBytes(e);
  AddWorkload(c, spine, &info);
  return info;
}

Result<LoadPlan> MakeLoadPlan(const EngineOptions& options, const ModelConfig& c) {
  const std::vector<SpineTensorEntry> spine = SpineTensorTable(c, options.spine_int8);
  LoadPlan p;
  DF_ASSIGN_OR_RETURN(p.info, MakeShape(options, c, spine));
  const int64_t capacity = p.info.context_capacity;
  const int64_t chunk = std::min(options.prefill_chunk, capacity);  // 0: a planned wave
  DF_ASSIGN_OR_RETURN(p.memory, PlanFor(options, c, spine, chunk, capacity));
  ModelInfo& info = p.info;
  info.memory_plan = p.memory.Describe();
  if (options.spine_int8) {
    info.memory_plan += "\n  spine: row-int8 (not weight-exact: logits differ from the BF16 model)";
  }
  info.experts_streamed = p.memory.experts_streamed;
  info.expert_cache_bytes = p.memory.expert_cache_bytes;
  info.memory_budget = p.memory.budget.bytes;
  info.spine_resident = p.memory.spine_resident;
  info.session_bytes = p.memory.session_bytes;
  info.prefill_wave = p.memory.wave_positions;
  info.prefill_wave_fixed = p.memory.needs.wave_fixed;
  info.spine_pinned_bytes = p.memory.spine_pinned_bytes;
  info.spine_streamed_bytes = p.memory.spine_streamed_bytes;
  info.spine_ring_depth = p.memory.spine_ring_depth;
  info.expert_read_mode =
      p.memory.experts_streamed ? (options.direct_io ? "direct" : "buffered") : "mapped";
  return p;
}

}  // namespace

double PrefillFlops(const ModelInfo& info, int64_t start, int64_t tokens, int64_t logits_rows) {
  const auto n = static_cast<double>(tokens), s = static_cast<double>(start);
  // Position p attends over p + 1 cached positions: sum over p in [start, start + tokens).
  const double attended = n * s + n * (n + 1) / 2;
  const double macs =
      n * static_cast<double>(info.linear_macs_per_token + info.kda_macs_per_token) +
      attended * static_cast<double>(info.mla_macs_per_cached_position) +
      static_cast<double>(logits_rows) * static_cast<double>(info.lm_head_macs);
  return 2 * macs;
}

Status CheckTokenIds(std::span<const int32_t> ids, int64_t vocab_size) {
  for (const int32_t id : ids) {
    if (id < 0 || id >= vocab_size) {
      return Status::Error("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                           std::to_string(vocab_size) + ")");
    }
  }
  return Status::Ok();
}

namespace {

// A model spread over several drives (weights/placement.h) streams its experts: a copy on another
// drive is read, never mapped. kAuto therefore becomes kStreamed; kMapped is refused once `spread
// --move` took experts off the model folder (mapping would read the holes left there).
Result<EngineOptions> WithPlacement(const EngineOptions& options) {
  EngineOptions o = options;
  std::error_code ec;
  if (!std::filesystem::exists(PlacementPath(options.model_dir), ec)) return o;
  DF_ASSIGN_OR_RETURN(PlacementModel model, DescribePlacementModel(options.model_dir));
  DF_ASSIGN_OR_RETURN(std::optional<Placement> placement, LoadPlacement(options.model_dir, model));
  if (!placement) return o;
  if (o.experts == EngineOptions::Experts::kAuto) o.experts = EngineOptions::Experts::kStreamed;
  if (o.experts == EngineOptions::Experts::kMapped) {
    for (const uint32_t bits : placement->copies) {
      if (bits != 0 && (bits & 1u) == 0) {
        return Status::Error(
            "this model's experts were moved to other drives (`deltafin spread --move`, " +
            PlacementPath(options.model_dir) +
            "): mapped experts read the model folder only; use --experts streamed");
      }
    }
  }
  return o;
}

}  // namespace

namespace {

// The config `config_json` gives, or <model_dir>/config.json when it is empty.
Result<ModelConfig> ConfigFor(const EngineOptions& options, const std::string& config_json) {
  if (config_json.empty()) return LoadModelConfig(options.model_dir);
  return ParseModelConfig(config_json, "config.json");
}

}  // namespace

Result<ModelInfo> Engine::Plan(const EngineOptions& options) { return Plan(options, {}); }

Result<ModelInfo> Engine::Plan(const EngineOptions& plain_options, const std::string& config_json) {
  EngineOptions options = plain_options;
  if (!options.model_dir.empty()) {
    DF_ASSIGN_OR_RETURN(options, WithPlacement(plain_options));
  }
  DF_ASSIGN_OR_RETURN(ModelConfig config, ConfigFor(options, config_json));
  DF_ASSIGN_OR_RETURN(LoadPlan p, MakeLoadPlan(options, config));
  return p.info;
}

Result<ModelInfo> Engine::Shape(const EngineOptions& options, const std::string& config_json) {
  DF_ASSIGN_OR_RETURN(ModelConfig config, ConfigFor(options, config_json));
  return MakeShape(options, config, SpineTensorTable(config, options.spine_int8));
}

Result<std::unique_ptr<Engine>> Engine::Load(const EngineOptions& plain_options) {
  DF_ASSIGN_OR_RETURN(const EngineOptions options, WithPlacement(plain_options));
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  DF_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(options.model_dir));
  DF_ASSIGN_OR_RETURN(LoadPlan plan, MakeLoadPlan(options, config));
  if (options.threads > 0) SetDefaultThreadCount(options.threads);
  // Decide the scale audit from the config before binding (binding is where it happens).
  BindOptions bind;
  const uint64_t all_expert_bytes = plan.memory.needs.all_expert_bytes;
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
      // Streamed experts are checked as they are read (verify_expert_reads).
      bind.audit_expert_scales = all_expert_bytes <= (4ull << 30) &&
                                 options.expert_fetcher == nullptr && !plan.memory.experts_streamed;
      break;
  }
  DF_ASSIGN_OR_RETURN(impl->weights,
                      ModelWeights::Load(options.model_dir, std::move(config), bind));
  if (options.spine_int8) {
    DF_RETURN_IF_ERROR(AttachSpineInt8(options.model_dir, impl->weights.get()));
  }
  // The experts' reader first: a spread model's drives are the scheduler's lanes.
  std::unique_ptr<ExpertSpanReader> reader;
  if (plan.memory.experts_streamed) {
    DF_ASSIGN_OR_RETURN(reader, OpenExpertReader(*impl->weights, options.model_dir,
                                                 options.direct_io, &impl->drives));
  }
  // One pool for every streamed read, spine and experts alike, with io_threads reads in flight on
  // each drive. The memory plan streams the spine only with streamed experts, so this is exactly
  // when there is anything to stream.
  if (plan.memory.experts_streamed || !plan.memory.spine_resident) {
    impl->io_scheduler =
        std::make_unique<IoScheduler>(options.io_threads, reader ? reader->Drives() : 1);
  }
  if (plan.memory.experts_streamed) {
    if (plan.memory.spine_resident) {
      // The shards' mapped pages are then only the spine's, but a fault's read-around also
      // brings in the expert bytes next to each spine tensor: page cache the memory plan did not
      // count, which under a memory limit evicted resident spine pages that decode then faulted
      // back one by one (docs/PERFORMANCE.md, 2026-12-03). So faults read their own page only,
      // and the spine's matrices are read here, once, over their exact ranges. A streamed spine
      // keeps the read-around: its small tensors (norms, biases), evicted between tokens, come
      // back in a few large reads instead of one fault each.
      impl->weights->checkpoint.AdviseRandomAccess();
      SpinePages pages(*impl->weights, options.io_threads);
      for (int64_t g = 0; g <= pages.tail_group(); ++g) pages.MakeResident(g);
    }
    ExpertStreamOptions so;
    so.cache_bytes = plan.memory.expert_cache_bytes;
    so.io_threads = options.io_threads;
    so.verify_scales = options.verify_expert_reads;
    DF_ASSIGN_OR_RETURN(
        impl->streamer,
        ExpertStreamer::Create(*impl->weights, so, std::move(reader), impl->io_scheduler.get()));
    plan.info.expert_read_mode = impl->streamer->read_mode();
  }
  if (!plan.memory.spine_resident) {
    SpineRingOptions ro;
    ro.depth = plan.memory.spine_ring_depth;
    ro.readers = options.io_threads;
    ro.read_mode = options.direct_io ? ReadMode::kDirect : ReadMode::kBuffered;
    ro.pinned = plan.memory.spine_pinned;
    DF_ASSIGN_OR_RETURN(impl->spine_ring,
                        SpineRing::Create(*impl->weights, ro, impl->io_scheduler.get()));
    // The ring's actual slots include alignment and the small tensors between matrices; the
    // plan allowed for both. More would mean the plan under-counted: say so rather than exceed.
    if (impl->spine_ring->slot_bytes() > plan.memory.spine_ring_slot_bytes) {
      return Status::Error("internal: spine ring slot of " +
                           HumanBytes(impl->spine_ring->slot_bytes()) + " exceeds the planned " +
                           HumanBytes(plan.memory.spine_ring_slot_bytes));
    }
    plan.info.spine_pinned_bytes = impl->spine_ring->pinned_bytes();
    plan.info.spine_streamed_bytes = impl->spine_ring->streamed_bytes_per_pass();
    plan.info.memory_plan += "\n  " + impl->spine_ring->Describe();
  }
  impl->info = std::move(plan.info);
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Result<DiskProbe> Engine::ProbeDiskBandwidth(int64_t expert_reads, uint64_t seed) const {
  std::lock_guard<std::mutex> lock(impl_->stream_mutex);
  // A spread model is probed through its drive set, so the probe sees every drive's bandwidth.
  DriveSetReader* drive_set = nullptr;
  DF_ASSIGN_OR_RETURN(auto reader, OpenExpertReader(*impl_->weights, impl_->options.model_dir,
                                                    impl_->options.direct_io, &drive_set));
  DiskProbe probe;
  if (impl_->spine_ring == nullptr) {
    DF_ASSIGN_OR_RETURN(
        probe.bytes_per_second,
        ProbeExpertReads(*impl_->weights, *reader, impl_->options.io_threads, expert_reads, seed));
    probe.pattern = std::to_string(expert_reads) + " random expert reads";
  } else {
    DF_ASSIGN_OR_RETURN(probe.bytes_per_second,
                        ProbeDecodeReads(*impl_->weights, *reader, *impl_->spine_ring,
                                         impl_->options.io_threads, seed));
    probe.pattern = "one decode step's reads: the streamed spine's ring chunks and " +
                    std::to_string(impl_->weights->config.num_experts_per_token) +
                    " random experts a MoE layer, in pass order";
  }
  if (drive_set != nullptr) probe.drives = drive_set->Stats();
  return probe;
}

const ModelInfo& Engine::info() const { return impl_->info; }

std::vector<DriveStats> Engine::DriveStatistics() const {
  if (impl_->drives == nullptr) return {};
  return impl_->drives->Stats();
}

std::unique_ptr<Session> Engine::NewSession() const {
  const int64_t chunk = impl_->info.prefill_wave;
  auto impl =
      std::make_unique<Session::Impl>(*impl_->weights, chunk, impl_->info.context_capacity,
                                      VerifyRows(impl_->options), RollbackMode(impl_->options));
  // The session's expert source: the engine's streamer (shared, so passes take stream_mutex) or
  // the mapped spans (null: the pass's own), behind a stream install's fetcher when there is one.
  ExpertSource* experts = impl_->streamer.get();
  if (experts != nullptr) impl->stream_mutex = &impl_->stream_mutex;
  if (ExpertFetcher* fetcher = impl_->options.expert_fetcher.get()) {
    if (experts == nullptr) {
      impl->mapped_experts = std::make_unique<MappedExperts>(*impl_->weights);
      experts = impl->mapped_experts.get();
    }
    impl->fetching_experts =
        std::make_unique<FetchingExperts>(fetcher, experts, impl_->weights->config.num_experts);
    experts = impl->fetching_experts.get();
  }
  impl->forward.SetExpertSource(experts, impl_->options.lookahead);
  impl->forward.SetSpineSource(impl_->spine_ring.get());
  return std::unique_ptr<Session>(new Session(std::move(impl)));
}

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() = default;

Status Session::Prefill(std::span<const int32_t> tokens, std::span<float> all_logits,
                        const PrefillProgress& progress) {
  const auto vocab = static_cast<size_t>(impl_->vocab);
  if (tokens.empty()) return Status::Error("prefill needs at least one token");
  if (!all_logits.empty() && all_logits.size() != tokens.size() * vocab) {
    return Status::Error("all_logits must hold tokens.size() * vocab floats");
  }
  ForwardPass& f = impl_->forward;
  // A prompt longer than the room left fails here, before any wave runs.
  const int64_t capacity = f.capacity();
  if (f.position() + static_cast<int64_t>(tokens.size()) > capacity) {
    return Status::Error("prompt too long: " + std::to_string(tokens.size()) +
                         " tokens at position " + std::to_string(f.position()) +
                         " exceed the context capacity of " + std::to_string(capacity) +
                         " positions (raise --ctx)");
  }
  DF_RETURN_IF_ERROR(CheckTokenIds(tokens, impl_->vocab));
  std::unique_lock<std::mutex> lock;
  if (impl_->stream_mutex != nullptr) lock = std::unique_lock<std::mutex>(*impl_->stream_mutex);
  // Waves of prefill_chunk positions (the planned wave, or --prefill-chunk), each one forward
  // pass, layer-major: every routed expert a wave needs is read once for the wave. Logits are
  // computed only where asked: every position's, or the last wave's last position's.
  const auto wave = static_cast<size_t>(impl_->prefill_chunk);
  for (size_t begin = 0; begin < tokens.size();) {
    const size_t n = std::min(tokens.size() - begin, wave);
    const bool last = begin + n == tokens.size();
    float* out = !all_logits.empty() ? all_logits.data() + begin * vocab
                 : last              ? impl_->logits.data()
                                     : nullptr;
    // Only prefill passes read the interrupt flag: a decode step is short, and a verify pass
    // must reach its Commit.
    f.SetInterrupt(impl_->interrupt);
    Status st = f.Run(tokens.data() + begin, static_cast<int64_t>(n), !all_logits.empty(), out);
    f.SetInterrupt(nullptr);
    if (IsInterrupted(st)) {
      f.Reset();
      return st;
    }
    DF_RETURN_IF_ERROR(st);
    begin += n;
    if (progress) progress(static_cast<int64_t>(begin), static_cast<int64_t>(tokens.size()));
  }
  if (!all_logits.empty()) {
    std::copy_n(all_logits.data() + (tokens.size() - 1) * vocab, vocab, impl_->logits.data());
  }
  return Status::Ok();
}

Status Session::Decode(int32_t token) {
  std::unique_lock<std::mutex> lock;
  if (impl_->stream_mutex != nullptr) lock = std::unique_lock<std::mutex>(*impl_->stream_mutex);
  return impl_->forward.Run(&token, 1, false, impl_->logits.data());
}

Status Session::Verify(std::span<const int32_t> tokens, std::span<float> logits_rows) {
  const auto vocab = static_cast<size_t>(impl_->vocab);
  if (tokens.empty()) return Status::Error("verify needs at least one token");
  if (logits_rows.size() != tokens.size() * vocab) {
    return Status::Error("logits_rows must hold tokens.size() * vocab floats");
  }
  std::unique_lock<std::mutex> lock;
  if (impl_->stream_mutex != nullptr) lock = std::unique_lock<std::mutex>(*impl_->stream_mutex);
  DF_RETURN_IF_ERROR(impl_->forward.Verify(tokens.data(), static_cast<int64_t>(tokens.size()),
                                           logits_rows.data()));
  impl_->pending_rows = logits_rows.data();
  return Status::Ok();
}

Status Session::Commit(int64_t accepted) {
  DF_RETURN_IF_ERROR(impl_->forward.Commit(accepted));
  const auto vocab = static_cast<size_t>(impl_->vocab);
  std::copy_n(impl_->pending_rows + static_cast<size_t>(accepted) * vocab, vocab,
              impl_->logits.data());
  impl_->pending_rows = nullptr;
  return Status::Ok();
}

int64_t Session::max_verify_rows() const { return impl_->forward.max_verify_rows(); }
uint64_t Session::rollback_bytes_per_row() const { return impl_->forward.rollback_bytes_per_row(); }
uint64_t Session::ReservedBytes() const {
  return impl_->forward.ReservedBytes() + BufferBytes(impl_->logits);
}

std::span<const float> Session::Logits() const { return impl_->logits.span(); }
int64_t Session::position() const { return impl_->forward.position(); }
void Session::Reset() {
  impl_->forward.Reset();
  impl_->pending_rows = nullptr;
}
void Session::SetObserver(ForwardObserver* observer) { impl_->forward.SetObserver(observer); }
void Session::SetInterrupt(const std::atomic<bool>* flag) { impl_->interrupt = flag; }

bool IsInterrupted(const Status& status) {
  return !status.ok() && status.message() == kInterrupted;
}
const SessionStats& Session::stats() const { return impl_->forward.stats(); }
void Session::ResetStats() { impl_->forward.ResetStats(); }

namespace {
constexpr char kStateMagic[8] = {'D', 'F', 'S', 'T', 'A', 'T', 'E', '1'};
// The model shape a snapshot belongs to (a snapshot of another shape is refused, not misread).
uint64_t ShapeFingerprint(const ModelConfig& c) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](int64_t v) {
    h ^= static_cast<uint64_t>(v);
    h *= 1099511628211ull;
  };
  for (int64_t v : {c.vocab_size, c.hidden_size, c.num_hidden_layers, c.kv_lora_rank,
                    c.qk_rope_head_dim, c.kda_heads, c.kda_head_dim, c.conv_kernel_size}) {
    mix(v);
  }
  for (AttentionKind k : c.layer_kinds) mix(static_cast<int64_t>(k));
  return h;
}
constexpr size_t kStateHeader = sizeof(kStateMagic) + sizeof(uint64_t);
}  // namespace

uint64_t Session::StateBytes() const {
  return kStateHeader + static_cast<uint64_t>(impl_->vocab) * sizeof(float) +
         impl_->forward.StateBytes(impl_->forward.position());
}

Status Session::SaveState(std::vector<uint8_t>* out) const {
  out->clear();
  out->reserve(StateBytes());
  const uint64_t fp = ShapeFingerprint(impl_->forward.config());
  const auto* magic = reinterpret_cast<const uint8_t*>(kStateMagic);
  out->insert(out->end(), magic, magic + sizeof(kStateMagic));
  const auto* fpb = reinterpret_cast<const uint8_t*>(&fp);
  out->insert(out->end(), fpb, fpb + sizeof(fp));
  const auto* lb = reinterpret_cast<const uint8_t*>(impl_->logits.data());
  out->insert(out->end(), lb, lb + impl_->logits.size() * sizeof(float));
  impl_->forward.AppendState(out);
  return Status::Ok();
}

Status Session::RestoreState(std::span<const uint8_t> state) {
  impl_->forward.Reset();
  const size_t logits_bytes = impl_->logits.size() * sizeof(float);
  if (state.size() < kStateHeader + logits_bytes ||
      std::memcmp(state.data(), kStateMagic, sizeof(kStateMagic)) != 0) {
    return Status::Error("session state: not a snapshot (bad header or too short)");
  }
  uint64_t fp = 0;
  std::memcpy(&fp, state.data() + sizeof(kStateMagic), sizeof(fp));
  if (fp != ShapeFingerprint(impl_->forward.config())) {
    return Status::Error("session state: saved by a model of another shape");
  }
  std::memcpy(impl_->logits.data(), state.data() + kStateHeader, logits_bytes);
  auto used = impl_->forward.RestoreState(state.subspan(kStateHeader + logits_bytes));
  if (!used.ok()) {
    impl_->forward.Reset();
    return used.status();
  }
  if (kStateHeader + logits_bytes + *used != state.size()) {
    impl_->forward.Reset();
    return Status::Error("session state: " + std::to_string(state.size()) + " bytes, expected " +
                         std::to_string(kStateHeader + logits_bytes + *used));
  }
  return Status::Ok();
}

const char* OpFamilyName(OpFamily family) {
  switch (family) {
    case OpFamily::kEmbedding:
      return "embedding";
    case OpFamily::kKdaProjections:
      return "kda_projections";
    case OpFamily::kKdaConv:
      return "kda_conv";
    case OpFamily::kKdaRecurrence:
      return "kda_recurrence";
    case OpFamily::kMlaProjections:
      return "mla_projections";
    case OpFamily::kMlaAttention:
      return "mla_attention";
    case OpFamily::kAttnRes:
      return "attn_res";
    case OpFamily::kDenseFfn:
      return "dense_ffn";
    case OpFamily::kRouter:
      return "router";
    case OpFamily::kRoutedExperts:
      return "routed_experts";
    case OpFamily::kSharedExperts:
      return "shared_experts";
    case OpFamily::kLatentProjections:
      return "latent_projections";
    case OpFamily::kLmHead:
      return "lm_head";
    case OpFamily::kExpertIoWait:
      return "expert_io_wait";
    case OpFamily::kSpineIoWait:
      return "spine_io_wait";
    case OpFamily::kOther:
      return "other";
    case OpFamily::kCount:
      break;
  }
  return "unknown";
}

int32_t ArgmaxToken(std::span<const float> logits) {
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

KernelBuildInfo GetKernelBuildInfo() {
  return {kernels::ActiveSimdTarget(), kernels::SimdTargetNames(true),
          kernels::SimdTargetNames(false), kernels::HighwayVersion()};
}

}  // namespace deltafin
