// The Deltafin engine API: the only interface the CLI and the server use.
//
// An Engine is immutable once loaded (config, validated weights); a Session is the mutable state
// of one sequence (KDA recurrent and conv state, MLA latent cache, position, last logits) plus the
// working memory reserved for it up front. Neither exposes tensors. Decode() does not allocate:
// every buffer it touches is reserved when the Session is created.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "deltafin/expert_fetcher.h"

namespace deltafin {

struct EngineOptions {
  std::string model_dir;
  // Longest sequence a session can hold (MLA cache positions). 0: min(config limit, 4096).
  int64_t context_capacity = 0;
  // Positions one prefill pass processes. 0 (the default): a planned wave, as many positions as
  // the memory plan holds up to the whole context (each routed expert is then read once per wave,
  // docs/STREAMING.md "Prefill waves"). N > 0: fixed chunks of N positions (tests, comparisons).
  int64_t prefill_chunk = 0;
  // Audit every MXFP4 scale byte in [2, 252] at load. kAuto audits when all experts total
  // at most 4 GiB (reading the scales of a full K3 at load would take minutes).
  enum class ScaleAudit { kAuto, kOn, kOff };
  ScaleAudit audit_expert_scales = ScaleAudit::kAuto;
  // Compute threads for the kernels (process-wide). 0: every CPU the process may use.
  int threads = 0;
  // Stream installs: fetches experts that are not on the local disk yet (null for a full install
  // or a plain snapshot folder). The engine calls it before reading any expert's bytes.
  std::shared_ptr<ExpertFetcher> expert_fetcher;

  // Memory and expert streaming (docs/STREAMING.md).
  // RAM the engine may use, in bytes; 0: the machine's (cgroup-aware) minus headroom.
  uint64_t mem_limit = 0;
  // kAuto maps every expert when the model fits the budget and streams them from disk otherwise.
  enum class Experts { kAuto, kMapped, kStreamed };
  Experts experts = Experts::kAuto;
  uint64_t expert_cache_bytes = 0;  // streamed experts: RAM cache size; 0 = what the plan leaves
  int io_threads = 8;               // concurrent reads per drive (each drive's queue depth)
  bool direct_io = true;            // O_DIRECT / F_NOCACHE expert and spine reads
  // A spine that does not fit in RAM: how many layers ahead of the one computing are read
  // (the ring holds spine_readahead + 1 layers; 0 reads each layer when it is needed).
  int spine_readahead = 1;
  // Router lookahead: guess the next MoE layer's experts with its router and read them early.
  // kLayerOutput routes the layer's output (the next layer's FFN input as if its attention added
  // nothing); kPostAttention routes this layer's FFN input (issued earlier, guesses worse);
  // kBoth issues both. docs/STREAMING.md has the measured recall of each.
  enum class Lookahead { kOff, kLayerOutput, kPostAttention, kBoth };
  Lookahead lookahead = Lookahead::kLayerOutput;
  bool verify_expert_reads = true;  // check every read expert's scale bytes lie in [2, 252]
  // Row-int8 spine (docs/INT8.md): read the spine linears from <model_dir>/spine-int8 (written by
  // `deltafin convert-spine-int8`) instead of BF16. Not weight-exact: the logits differ.
  bool spine_int8 = false;

  // ---- Speculative decoding (docs/SPECULATION.md) ----
  // Most draft tokens one Session::Verify may check; the rollback memory for max_draft + 1 rows is
  // reserved when a session is created (0, the default: no verification, nothing reserved;
  // `run` and `bench decode` set it from --draft-max).
  int max_draft = 0;
  // How a verify pass keeps what rolling KDA back needs: kReplay stores each row's recurrence
  // inputs (19.4 MiB per row at K3 size, plus one state copy) and replays the accepted rows;
  // kSnapshot copies the recurrent state after every row (414 MiB per row at K3 size).
  enum class Rollback { kReplay, kSnapshot };
  Rollback rollback = Rollback::kReplay;
};

struct ModelInfo {
  std::string model_dir;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_experts = 0;
  int64_t experts_per_token = 0;
  int64_t eos_token_id = 0;
  int64_t bos_token_id = 0;
  int64_t context_capacity = 0;
  uint64_t expert_bytes = 0;
  // The memory plan (what is resident, what streams, the cache size), for the startup log.
  std::string memory_plan;
  bool experts_streamed = false;
  uint64_t expert_cache_bytes = 0;
  uint64_t spine_bytes = 0;
  uint64_t memory_budget = 0;
  bool spine_resident = true;  // false: streamed layer by layer through a ring (it does not fit)
  uint64_t session_bytes = 0;  // one session's state and working buffers (the plan's)
  // Positions one prefill pass processes: the planned wave, or the fixed --prefill-chunk.
  int64_t prefill_wave = 0;
  bool prefill_wave_fixed = false;          // --prefill-chunk N (fixed chunks), not a planned wave
  uint64_t spine_pinned_bytes = 0;          // streamed spine: the layers read once and kept
  uint64_t spine_streamed_bytes = 0;        // streamed spine: bytes read per token
  int spine_ring_depth = 0;                 // streamed spine: ring slots
  const char* expert_read_mode = "mapped";  // "direct", "buffered" or "mapped"
  bool spine_int8 = false;                  // the spine linears are row-int8 (not weight-exact)
  // The work of one decode step, from the config alone, for `deltafin plan` (docs/PLAN.md).
  int64_t num_moe_layers = 0;
  uint64_t spine_bytes_per_token = 0;    // spine weight bytes a step reads (one embedding row)
  int64_t spine_products_per_token = 0;  // spine matrix-kernel calls a step makes
  uint64_t router_bytes = 0;             // one MoE layer's router (the lookahead reads one more)
  uint64_t recurrent_state_bytes = 0;    // KDA state, read and written every step
  // Spine bytes a step reads between a layer's routed experts and the end of that layer (each
  // MoE layer's latent up-projection, and lm_head): work no expert read can overlap, because the
  // lookahead for the next layer is issued only after it.
  uint64_t unoverlapped_spine_bytes_per_token = 0;
  // The arithmetic of a prompt token, from the config (PrefillFlops): multiply-adds of every
  // matrix a position runs (spine linears but the embedding and lm_head, and its top-k routed
  // experts per MoE layer), of the KDA recurrence, and of MLA's attention per cached position.
  uint64_t linear_macs_per_token = 0;
  uint64_t kda_macs_per_token = 0;
  uint64_t mla_macs_per_cached_position = 0;
  uint64_t lm_head_macs = 0;  // one position's logits
};

// Floating-point operations (2 per multiply-add) of prefilling `tokens` positions after `start`
// with `logits_rows` positions' logits: `bench prefill`'s compute floor and `plan`'s prediction.
double PrefillFlops(const ModelInfo& info, int64_t start, int64_t tokens, int64_t logits_rows);

// Receives intermediate values during a forward pass (debug dumps, route tests, traces).
// Spans are only valid during the call.
class ForwardObserver {
 public:
  virtual ~ForwardObserver() = default;
  // Named per-layer activations: "attn_in" (normalised), "attn_out", "ffn_in" (normalised),
  // "ffn_out", "layer_out" (the running partial after the layer); layer -1 for "final_hidden".
  virtual void OnActivation(int64_t /*position*/, int64_t /*layer*/, const char* /*name*/,
                            std::span<const float> /*values*/) {}
  // The routed experts of one MoE layer for one position, in selection order.
  virtual void OnRoute(int64_t /*position*/, int64_t /*layer*/,
                       std::span<const int32_t> /*experts*/, std::span<const float> /*weights*/) {}
};

// Where a forward pass's wall time went (docs/BREAKDOWN.md). The forward pass reads the steady
// clock at every section boundary and charges the time since the previous read to the section's
// family, so every moment of a forward pass is charged to exactly one family and the families
// sum to the passes' wall time. Sections that belong to no family are charged to kOther.
enum class OpFamily : uint8_t {
  kEmbedding,          // token embedding rows widened to fp32
  kKdaProjections,     // KDA q/k/v, decay, beta and gate projections, and o_proj
  kKdaConv,            // KDA causal short convolutions (q, k, v)
  kKdaRecurrence,      // KDA gated delta-rule state update and read, head norm, output gate
  kMlaProjections,     // MLA q/kv/gate projections, latent-cache append, o_proj
  kMlaAttention,       // MLA absorbed attention over the latent cache
  kAttnRes,            // Block AttnRes mixes, sub-layer RMSNorms, anchors and residual adds
  kDenseFfn,           // the dense FFN of the first layers
  kRouter,             // router logits and top-k selection (lookahead guesses included)
  kRoutedExperts,      // routed experts' MXFP4 products, SiTU, the weighted combine
  kSharedExperts,      // the fused shared experts
  kLatentProjections,  // LatentMoE latent_down, latent norm and latent_up
  kLmHead,             // final norm and lm_head
  kExpertIoWait,       // waiting for expert reads or fetches (and queueing them)
  kSpineIoWait,        // bringing spine pages in from disk (a spine that is not resident)
  kOther,              // the rest: observer callbacks, argument checks, loop bookkeeping
  kCount
};
inline constexpr size_t kOpFamilyCount = static_cast<size_t>(OpFamily::kCount);
// snake_case name of a family ("kda_recurrence", "expert_io_wait", ...), as in --stats-json.
const char* OpFamilyName(OpFamily family);

// Cumulative counters of one session since it was created (or since ResetStats()). Filled by the
// forward pass and the expert source; read by `run --stats`, `bench decode` and the server's
// /metrics. "Loads" count (layer, expert) pairs a forward pass needed, once per chunk.
struct SessionStats {
  uint64_t positions = 0;          // tokens fed (prefill and decode)
  uint64_t forward_calls = 0;      // ForwardPass runs (one per decode step or prefill chunk)
  uint64_t expert_loads = 0;       // experts a layer needed (the union over the chunk)
  uint64_t expert_cache_hits = 0;  // of those, already in RAM (cache, prefetch or mapping)
  uint64_t prefetch_hits = 0;      // of the hits, brought in by the prefetcher
  uint64_t prefetch_issued = 0;    // experts the prefetcher started reading
  uint64_t prefetch_wasted = 0;    // prefetched experts evicted or cancelled without being used
  uint64_t expert_bytes_read = 0;  // expert bytes read from disk or network by this session
  // Bytes of the experts a layer needed that were not in RAM before the step (cache misses and
  // experts the prefetcher read for it): what must come from disk, wasted guesses excluded.
  uint64_t expert_bytes_needed = 0;
  uint64_t spine_bytes_read = 0;  // spine bytes read from disk (streamed spine only)
  double io_wait_seconds = 0;     // time the forward pass waited for expert or spine reads
  double compute_seconds = 0;     // wall time of forward passes minus io_wait_seconds
  // Wall time of forward passes by family, indexed by OpFamily; sums to their wall time.
  std::array<double, kOpFamilyCount> op_seconds{};
  double op(OpFamily family) const { return op_seconds[static_cast<size_t>(family)]; }
};

class Engine;

// One drive of a model spread over several (`deltafin spread`, docs/STREAMING.md "Several
// drives"): what it served since the engine loaded. Drive 0 is the model folder.
struct DriveStats {
  std::string path;
  uint64_t bytes_read = 0;   // bytes transferred (whole aligned blocks for direct reads)
  uint64_t reads = 0;        // expert reads it answered
  double busy_seconds = 0;   // time with at least one of its reads in flight
  double busy_fraction = 0;  // busy_seconds over the time since load
  double gbps = 0;           // bytes_read / busy_seconds, in GB/s
  bool failed = false;       // a read failed: not used since
};

// What Engine::ProbeDiskBandwidth measured.
struct DiskProbe {
  double bytes_per_second = 0;
  std::string pattern;  // what was read, for logs and reports ("256 random expert reads", ...)
  std::vector<DriveStats> drives;  // a spread model: what each drive served of the probe's reads
};

// Ok when every id lies in [0, vocab_size); otherwise an error naming the first one that does not.
// Session::Prefill and Verify apply it; a command may call it first, before a model loads, so that
// a bad id is reported without the load's output in front of it.
Status CheckTokenIds(std::span<const int32_t> ids, int64_t vocab_size);

// Called by Session::Prefill after each wave it feeds (ModelInfo::prefill_wave positions, the
// last one maybe shorter) with the positions of this call fed so far and the call's total, for
// progress displays (waves done = ceil(done / prefill_wave)). Runs on the calling thread between
// chunks; must not call into the session.
using PrefillProgress = std::function<void(int64_t done, int64_t total)>;

class Session {
 public:
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Feeds `tokens` at the next positions. If `all_logits` is non-empty it receives the logits of
  // every fed position, [tokens.size(), vocab] row-major; Logits() always holds the last one.
  // `progress`, when set, is called after every chunk.
  Status Prefill(std::span<const int32_t> tokens, std::span<float> all_logits = {},
                 const PrefillProgress& progress = nullptr);
  // Feeds one token. Allocation-free.
  Status Decode(int32_t token);
  std::span<const float> Logits() const;
  int64_t position() const;
  // Forgets the sequence (state zeroed, position 0); keeps the reserved memory.
  void Reset();
  void SetObserver(ForwardObserver* observer);
  // A flag that stops a Prefill in progress within one routed expert's work (a server's client
  // that went away; a K3-scale wave otherwise runs for minutes): Prefill reads it between layers
  // and between routed experts and, once it holds true, returns an error for which
  // IsInterrupted() holds. A wave stopped halfway leaves no usable state, so the session is then
  // Reset (position 0). Null (the default) turns the check off. Decode and Verify ignore it.
  void SetInterrupt(const std::atomic<bool>* flag);
  const SessionStats& stats() const;
  void ResetStats();

  // State snapshots (the server's prefix cache, docs/SERVER.md): the exact state after the tokens
  // fed so far (position, KDA recurrent and conv state, MLA latent cache rows, last logits) as
  // opaque bytes. RestoreState puts a snapshot of a session of the same model shape back, after
  // which Logits() and every later Prefill/Decode give the same floats, bit for bit, as feeding
  // the prefix would have. It fails (and leaves the session reset) on a snapshot of another shape
  // or of the wrong size. Neither is for the decode loop: SaveState allocates *out.
  Status SaveState(std::vector<uint8_t>* out) const;
  Status RestoreState(std::span<const uint8_t> state);
  // Bytes SaveState writes at the current position.
  uint64_t StateBytes() const;

  // ---- Speculative decoding (docs/SPECULATION.md) ----
  // One forward pass over tokens[0] (the next token, already chosen from Logits()) and the drafts
  // tokens[1..]: 1 <= tokens.size() <= max_verify_rows(). `logits_rows` receives the logits of
  // every row, [tokens.size(), vocab]: row i is what Decode would give after tokens[0..i]. The
  // session then awaits Commit (which reads `logits_rows`: keep it alive until then); Prefill,
  // Decode and Verify fail until it comes. Allocation-free.
  Status Verify(std::span<const int32_t> tokens, std::span<float> logits_rows);
  // Keeps tokens[0..accepted] of the pending Verify: afterwards the session (KDA recurrent and conv
  // state, MLA cache, position, Logits() = row `accepted`) is bit for bit what Prefill or Decode
  // of those tokens alone would have left. Allocation-free.
  Status Commit(int64_t accepted);
  // EngineOptions::max_draft + 1 (0 when speculation was not reserved).
  int64_t max_verify_rows() const;
  // KDA rollback memory reserved per verify row, in bytes (the memory report).
  uint64_t rollback_bytes_per_row() const;
  // Bytes of the state and working buffers this session reserved when it was created (recurrent
  // state, latent cache, scratch, rollback, logits): what ModelInfo::session_bytes plans for.
  uint64_t ReservedBytes() const;

 private:
  friend class Engine;
  struct Impl;
  explicit Session(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> Load(const EngineOptions& options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const ModelInfo& info() const;
  std::unique_ptr<Session> NewSession() const;

  // The memory plan Load would make for `options` (ModelInfo's plan fields and model shape),
  // from config.json alone: no weights are read.
  static Result<ModelInfo> Plan(const EngineOptions& options);
  // The same for a model given by its config.json text instead of a folder's (`plan --k3` plans
  // a model that is not on this machine). options.model_dir may be empty; when set, only its
  // placement file (`deltafin spread`) is read.
  static Result<ModelInfo> Plan(const EngineOptions& options, const std::string& config_json);
  // The model's shape and the work of a step and of a prompt token (ModelInfo's shape and
  // workload fields; the memory plan's fields stay zero), from `config_json`, or from
  // <options.model_dir>/config.json when it is empty. No memory budget is involved: only
  // spine_int8 and context_capacity of `options` matter.
  static Result<ModelInfo> Shape(const EngineOptions& options, const std::string& config_json = {});
  // Disk read bandwidth for decode's own access pattern (the floors of bench decode and
  // run --stats), with the engine's I/O threads and read mode (direct or buffered). With a
  // resident spine decode reads only experts: `expert_reads` experts at random across all MoE
  // layers. With a streamed spine, one decode step's reads: in pass order, each streamed group's
  // chunks as the ring reads them, then top-k random experts of that layer. Not to be called
  // while a session of this engine runs a forward pass.
  Result<DiskProbe> ProbeDiskBandwidth(int64_t expert_reads, uint64_t seed) const;
  // Per drive, when the model's streamed experts are spread over several (a placement file);
  // empty otherwise. Cumulative since Load.
  std::vector<DriveStats> DriveStatistics() const;

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// True for the error a Prefill returns when its interrupt flag stopped it (Session::SetInterrupt).
bool IsInterrupted(const Status& status);

// Greedy choice: the highest logit, ties to the lowest id.
int32_t ArgmaxToken(std::span<const float> logits);

// How the compute kernels were built and what they run on this CPU, for `deltafin --version`.
// Targets are Highway's names ("AVX3", "AVX2", "NEON", "SCALAR"), lists space-separated, best
// first.
struct KernelBuildInfo {
  std::string simd_target;       // the one the kernels dispatch to on this CPU
  std::string usable_targets;    // compiled in and supported by this CPU
  std::string compiled_targets;  // compiled in
  std::string highway_version;
};
KernelBuildInfo GetKernelBuildInfo();

}  // namespace deltafin
