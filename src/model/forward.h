// The whole-model forward pass over a chunk of consecutive positions (docs/MODEL.md §4.9), and the
// per-sequence state it advances.
//
// Layer-major: every layer processes all positions of the chunk before the next layer runs, so
// a layer's expert union is known (and read once) for the whole chunk. Block Attention Residual
// anchors are rebuilt per position inside one call and never cached across calls. All memory is
// reserved by Reserve(); Run() does not allocate.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/status.h"
#include "deltafin/engine.h"
#include "model/kda.h"
#include "model/mla.h"
#include "model/moe.h"
#include "model/op_timer.h"
#include "weights/expert_source.h"
#include "weights/spine_source.h"
#include "weights/weights.h"

namespace deltafin {

class ForwardPass {
 public:
  // `max_chunk`: positions per Run(); `capacity`: longest sequence (MLA cache);
  // `max_verify_rows`: rows of the longest speculative verify pass (0: none; <= max_chunk).
  ForwardPass(const ModelWeights& weights, int64_t max_chunk, int64_t capacity,
              int64_t max_verify_rows = 0, KdaRollbackMode rollback = KdaRollbackMode::kReplay);

  // Feeds tokens[0..n) (n <= max_chunk) at position(). Writes logits of every position into
  // `logits` [n, vocab] when `all_positions`, else only the last one into logits [vocab];
  // computes none when `logits` is null (a prefill wave before the prompt's last).
  Status Run(const int32_t* tokens, int64_t n, bool all_positions, float* logits);

  // Speculative verification (docs/SPECULATION.md): feeds tokens[0..n) (n <= max_verify_rows) like
  // Run(all_positions) and records what Commit needs to keep only a prefix of them. Until Commit,
  // no other Run or Verify is allowed.
  Status Verify(const int32_t* tokens, int64_t n, float* logits);
  // Keeps rows 0..accepted of the pending verify pass: KDA recurrent and conv state, MLA cache
  // length and position become exactly what feeding those rows alone gives. Allocation-free.
  Status Commit(int64_t accepted);
  bool verify_pending() const { return pending_rows_ > 0; }
  int64_t max_verify_rows() const { return max_verify_rows_; }
  // KDA rollback memory reserved per verify row, all layers (the memory report).
  uint64_t rollback_bytes_per_row() const;
  // Bytes of every buffer reserved at construction: state, cache, scratch and rollback.
  uint64_t ReservedBytes() const;
  // Tests: the per-layer state (null where the layer is of the other kind).
  const KdaState* kda_state(int64_t layer) const {
    return kda_[static_cast<size_t>(layer)].recurrent.size() ? &kda_[static_cast<size_t>(layer)]
                                                             : nullptr;
  }
  const MlaCache* mla_cache(int64_t layer) const {
    return mla_[static_cast<size_t>(layer)].capacity ? &mla_[static_cast<size_t>(layer)] : nullptr;
  }

  int64_t position() const { return position_; }
  int64_t max_chunk() const { return max_chunk_; }
  int64_t capacity() const { return capacity_; }
  const ModelConfig& config() const { return c_; }
  void Reset();
  void SetObserver(ForwardObserver* observer) { observer_ = observer; }
  // Session::SetInterrupt: read between layers and between routed experts.
  void SetInterrupt(const std::atomic<bool>* flag) { interrupt_ = flag; }
  // Where the routed experts' spans come from (not owned; null: the mapped spans). `lookahead`
  // guesses the next layer's experts with its router, for sources that take guesses.
  using Lookahead = EngineOptions::Lookahead;
  void SetExpertSource(ExpertSource* source, Lookahead lookahead) {
    experts_ = source != nullptr ? source : &mapped_experts_;
    lookahead_ = lookahead;
  }
  // Where each layer's spine weights come from (not owned; null: the bound weights, resident).
  // A streamed spine (weights/spine_ring.h) is taken group by group before each layer runs,
  // waiting for its reads as spine I/O wait. One ring serves every session of an engine, one
  // pass at a time.
  void SetSpineSource(SpineSource* spine) { spine_ = spine != nullptr ? spine : &resident_spine_; }
  const SessionStats& stats() const { return stats_; }
  void ResetStats() { stats_ = SessionStats{}; }

  // Sequence state snapshots (forward_state.cc; the server's prefix cache): appends position(),
  // every KDA layer's conv history and recurrent state and every MLA layer's cache rows
  // [0, position()) to *out; RestoreState reads that layout back from the front of `bytes` and
  // returns how many bytes it used. The state after a restore is the saved one exactly, so what
  // follows computes the same floats as if the prefix had been prefilled.
  void AppendState(std::vector<uint8_t>* out) const;
  uint64_t StateBytes(int64_t position) const;  // what AppendState adds at `position`
  Result<size_t> RestoreState(std::span<const uint8_t> bytes);

 private:
  const float* const* Sources(int64_t t, int64_t n_anchors, const float** out) const;
  void Mix(const AlignedBuffer<float>& query, int64_t n, int64_t n_anchors, float* out);
  void Emit(int64_t n, int64_t layer, const char* name, const float* values, int64_t width);
  void Tail(int64_t t, int64_t n_anchors, float* logits);
  Status AcquireSpine(int64_t group);
  // The layer's weights as this pass computes on them (a streamed spine's copy aimed at its slot).
  const LayerWeights& Layer(int64_t i) const { return spine_->layer(i); }

  const ModelWeights& w_;
  const ModelConfig& c_;
  int64_t max_chunk_;
  int64_t capacity_;
  int64_t position_ = 0;
  int64_t max_anchors_;
  ForwardObserver* observer_ = nullptr;
  const std::atomic<bool>* interrupt_ = nullptr;
  MappedExperts mapped_experts_;  // the default expert source
  ResidentSpine resident_spine_;  // the default spine source
  ExpertSource* experts_ = &mapped_experts_;
  SpineSource* spine_ = &resident_spine_;
  Lookahead lookahead_ = Lookahead::kOff;
  SessionStats stats_;
  OpTimer timer_;                // charges stats_.op_seconds during Run()
  int64_t acquired_group_ = -1;  // the group AcquireSpine took last in this pass

  std::vector<KdaState> kda_;          // [layers] (only KDA layers initialised)
  std::vector<KdaRollback> rollback_;  // [layers] (KDA layers, when verify rows are reserved)
  int64_t max_verify_rows_ = 0;
  int64_t pending_rows_ = 0;   // rows of the verify pass awaiting Commit
  int64_t pending_start_ = 0;  // position before that pass
  bool verifying_ = false;     // Run() records rollback data
  std::vector<MlaCache> mla_;  // [layers] (only MLA layers initialised)
  KdaScratch kda_scratch_;
  MlaScratch mla_scratch_;
  FfnScratch ffn_scratch_;
  AlignedBuffer<float> partial_;  // [n, H] running block sum
  AlignedBuffer<float> anchors_;  // [n, max_anchors, H] completed blocks (anchor 0 = embedding)
  AlignedBuffer<float> anchor_inv_rms_;  // [n, max_anchors] each anchor's InvRms
  AlignedBuffer<float> mixed_;           // [n, H] AttnRes output
  AlignedBuffer<float> normed_;          // [n, H] RMS-normalised sub-layer input
  AlignedBuffer<float> sublayer_;        // [n, H] attention or FFN output
  AlignedBuffer<float> tail_;            // [H]
};

}  // namespace deltafin
