#include "model/forward.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "base/thread_pool.h"
#include "model/linear.h"
#include "model/ops.h"
#include "model/reserved_bytes.h"
#include "quant/bf16.h"

namespace deltafin {

namespace {
// Positions per part of a wave's AttnRes work: a short pass stays on one thread.
constexpr int64_t kMixGrain = 32;
}  // namespace

ForwardPass::ForwardPass(const ModelWeights& weights, int64_t max_chunk, int64_t capacity,
                         int64_t max_verify_rows, KdaRollbackMode rollback)
    : w_(weights),
      c_(weights.config),
      max_chunk_(max_chunk),
      capacity_(capacity),
      mapped_experts_(weights),
      resident_spine_(weights),
      max_verify_rows_(std::min(max_verify_rows, max_chunk)) {
  const int64_t layers = c_.num_hidden_layers, h = c_.hidden_size, n = max_chunk;
  // Boundaries are layers 0, B, 2B, ... each pushes one anchor.
  max_anchors_ = (layers - 1) / c_.attn_res_block_size + 1;
  kda_.resize(static_cast<size_t>(layers));
  mla_.resize(static_cast<size_t>(layers));
  for (int64_t i = 0; i < layers; ++i) {
    if (c_.layer_kinds[static_cast<size_t>(i)] == AttentionKind::kKda) {
      kda_[static_cast<size_t>(i)].Init(c_);
    } else {
      mla_[static_cast<size_t>(i)].Init(c_, capacity);
    }
  }
  rollback_.resize(static_cast<size_t>(layers));
  if (max_verify_rows_ > 0) {
    for (int64_t i = 0; i < layers; ++i) {
      if (c_.layer_kinds[static_cast<size_t>(i)] == AttentionKind::kKda) {
        rollback_[static_cast<size_t>(i)].Reserve(c_, rollback, max_verify_rows_);
      }
    }
  }
  kda_scratch_.Reserve(c_, n);
  mla_scratch_.Reserve(c_, n, capacity, DefaultThreadCount());
  ffn_scratch_.Reserve(c_, n);
  auto sz = [](int64_t v) { return static_cast<size_t>(v); };
  partial_.Resize(sz(n * h));
  anchors_.Resize(sz(n * max_anchors_ * h));
  anchor_inv_rms_.Resize(sz(n * max_anchors_));
  mixed_.Resize(sz(n * h));
  normed_.Resize(sz(n * h));
  sublayer_.Resize(sz(n * h));
  tail_.Resize(sz(h));
}

uint64_t ForwardPass::ReservedBytes() const {
  uint64_t total = kda_scratch_.Bytes() + mla_scratch_.Bytes() + ffn_scratch_.Bytes();
  for (const KdaState& k : kda_) total += k.Bytes();
  for (const MlaCache& m : mla_) total += m.Bytes();
  for (const KdaRollback& r : rollback_) total += r.Bytes();
  total += BufferBytes(partial_, anchors_, anchor_inv_rms_, mixed_, normed_, sublayer_, tail_);
  return total;
}

void ForwardPass::Reset() {
  position_ = 0;
  pending_rows_ = 0;
  for (auto& r : rollback_) r.rows = 0;
  for (auto& k : kda_) k.Clear();
  for (auto& m : mla_) m.length = 0;
}

// The AttnRes sources of position t into out[0, n_anchors + 1): its anchors, then its running
// partial (docs/MODEL.md §4.3). Callers pass a kMaxAttnResSources array (config parsing keeps
// n_anchors + 1 within it), so neither a wave's threads nor a decode step share a list.
const float* const* ForwardPass::Sources(int64_t t, int64_t n_anchors, const float** out) const {
  const int64_t h = c_.hidden_size;
  for (int64_t j = 0; j < n_anchors; ++j) out[j] = anchors_.data() + (t * max_anchors_ + j) * h;
  out[n_anchors] = partial_.data() + t * h;
  return out;
}

// AttnRes mix of [anchors of position t..., partial of t] for every position of the chunk. The
// positions are independent, so a wave splits them over the pool; a decode step stays on the
// calling thread.
void ForwardPass::Mix(const AlignedBuffer<float>& query, int64_t n, int64_t n_anchors, float* out) {
  const int64_t h = c_.hidden_size;
  DefaultPool().ParallelRanges(n, kMixGrain, [&](int64_t t0, int64_t t1) {
    const float* sources[kMaxAttnResSources];
    for (int64_t t = t0; t < t1; ++t) {
      AttnResMix(Sources(t, n_anchors, sources), n_anchors + 1, query.data(), h, c_.rms_norm_eps,
                 out + t * h, nullptr, anchor_inv_rms_.data() + t * max_anchors_);
    }
  });
}

void ForwardPass::Emit(int64_t n, int64_t layer, const char* name, const float* values,
                       int64_t width) {
  if (observer_ == nullptr) return;
  for (int64_t t = 0; t < n; ++t) {
    observer_->OnActivation(position_ + t, layer, name,
                            {values + t * width, static_cast<size_t>(width)});
  }
}

Status ForwardPass::AcquireSpine(int64_t group) {
  // The lookahead takes layer L+1 at the end of layer L; the layer itself then needs no second
  // call.
  if (group == acquired_group_ || spine_->always_ready()) return Status::Ok();
  acquired_group_ = group;
  timer_.Charge(OpFamily::kOther);
  uint64_t bytes = 0;
  Status st = spine_->Acquire(group, &bytes);
  if (!st.ok()) acquired_group_ = -1;
  stats_.spine_bytes_read += bytes;
  // The engine waits for these reads itself, so they are I/O wait, not compute.
  stats_.io_wait_seconds += timer_.Charge(OpFamily::kSpineIoWait);
  return st;
}

void ForwardPass::Tail(int64_t t, int64_t n_anchors, float* logits) {
  const int64_t h = c_.hidden_size;
  const float* sources[kMaxAttnResSources];
  AttnResMix(Sources(t, n_anchors, sources), n_anchors + 1, w_.tail_res_query.data(), h,
             c_.rms_norm_eps, tail_.data(), nullptr, anchor_inv_rms_.data() + t * max_anchors_);
  timer_.Charge(OpFamily::kAttnRes);
  RmsNorm(tail_.data(), w_.final_norm.data(), h, c_.rms_norm_eps, tail_.data());
  timer_.Charge(OpFamily::kLmHead);
  if (observer_) observer_->OnActivation(position_ + t, -1, "final_hidden", tail_.span());
  timer_.Charge(OpFamily::kOther);
  Linear(spine_->lm_head(), tail_.data(), 1, logits);
  timer_.Charge(OpFamily::kLmHead);
}

Status ForwardPass::Run(const int32_t* tokens, int64_t n, bool all_positions, float* logits) {
  const int64_t h = c_.hidden_size;
  if (n < 1 || n > max_chunk_) return Status::Error("chunk size out of range");
  if (pending_rows_ > 0) return Status::Error("a verify pass awaits Commit");
  if (position_ + n > capacity_) {
    return Status::Error("context full: " + std::to_string(position_ + n) +
                         " positions exceed the session capacity of " + std::to_string(capacity_) +
                         " (raise --ctx)");
  }
  DF_RETURN_IF_ERROR(CheckTokenIds({tokens, static_cast<size_t>(n)}, c_.vocab_size));
  const auto start = std::chrono::steady_clock::now();
  const double io_wait_before = stats_.io_wait_seconds;
  timer_.Start(&stats_);
  // Embedding rows, widened exactly.
  spine_->WillReadEmbeddingRows({tokens, static_cast<size_t>(n)});
  for (int64_t t = 0; t < n; ++t) {
    const uint16_t* row = w_.embed_tokens + static_cast<int64_t>(tokens[t]) * h;
    float* dst = partial_.data() + t * h;
    for (int64_t d = 0; d < h; ++d) dst[d] = Bf16ToF32(row[d]);
  }
  timer_.Charge(OpFamily::kEmbedding);

  int64_t n_anchors = 0;
  acquired_group_ = -1;  // another session may have used the ring since this one's last pass
  for (int64_t i = 0; i < c_.num_hidden_layers; ++i) {
    if (interrupt_ != nullptr && interrupt_->load(std::memory_order_relaxed)) {
      return Status::Error(kInterrupted);
    }
    DF_RETURN_IF_ERROR(AcquireSpine(i));
    const LayerWeights& lw = Layer(i);
    // 1. Attention input: the bare partial before any anchor exists (layer 0), else the mix.
    const float* attn_in = partial_.data();
    if (n_anchors > 0) {
      Mix(lw.attn_res_query, n, n_anchors, mixed_.data());
      attn_in = mixed_.data();
    }
    RmsNormRows(attn_in, lw.input_norm.data(), n, h, c_.rms_norm_eps, normed_.data());
    // 2. A block boundary pushes the finished block after the attention-side mix.
    const bool boundary = i % c_.attn_res_block_size == 0;
    if (boundary) {
      // Each anchor's RMS statistic once: every later mix of the pass reads it.
      const int64_t a = n_anchors;
      DefaultPool().ParallelRanges(n, kMixGrain, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          const float* src = partial_.data() + t * h;
          std::memcpy(anchors_.data() + (t * max_anchors_ + a) * h, src,
                      static_cast<size_t>(h) * sizeof(float));
          anchor_inv_rms_[static_cast<size_t>(t * max_anchors_ + a)] =
              InvRms(src, h, c_.rms_norm_eps);
        }
      });
      ++n_anchors;
    }
    timer_.Charge(OpFamily::kAttnRes);
    Emit(n, i, "attn_in", normed_.data(), h);
    timer_.Charge(OpFamily::kOther);
    // 3. Attention.
    if (lw.kind == AttentionKind::kKda) {
      KdaForward(c_, lw.kda, normed_.data(), n, &kda_[static_cast<size_t>(i)], &kda_scratch_,
                 sublayer_.data(), &timer_,
                 verifying_ ? &rollback_[static_cast<size_t>(i)] : nullptr);
    } else {
      DF_RETURN_IF_ERROR(MlaForward(c_, lw.mla, normed_.data(), n, &mla_[static_cast<size_t>(i)],
                                    &mla_scratch_, sublayer_.data(), &timer_));
    }
    Emit(n, i, "attn_out", sublayer_.data(), h);
    timer_.Charge(OpFamily::kOther);
    // 4. The partial restarts from the attention output at a boundary.
    if (boundary) {
      std::memcpy(partial_.data(), sublayer_.data(), static_cast<size_t>(n * h) * sizeof(float));
    } else {
      AddRows(sublayer_.data(), n * h, partial_.data());
    }
    // 5–7. FFN on the mix of anchors and partial; its output joins the partial.
    Mix(lw.mlp_res_query, n, n_anchors, mixed_.data());
    RmsNormRows(mixed_.data(), lw.post_attn_norm.data(), n, h, c_.rms_norm_eps, normed_.data());
    timer_.Charge(OpFamily::kAttnRes);
    Emit(n, i, "ffn_in", normed_.data(), h);
    timer_.Charge(OpFamily::kOther);
    if (lw.is_moe) {
      const bool next_is_moe =
          i + 1 < c_.num_hidden_layers && w_.layers[static_cast<size_t>(i + 1)].is_moe;
      const bool early = lookahead_ == Lookahead::kPostAttention || lookahead_ == Lookahead::kBoth;
      // A streamed spine guesses only with a next router already in RAM: waiting for its read
      // here would stall this layer on the next one's spine.
      const MoeWeights* next = nullptr;
      if (early && next_is_moe && experts_->takes_guesses()) {
        if (const LayerWeights* ready = spine_->ReadyLayer(i + 1)) next = &ready->moe;
      }
      const ExpertAccess access{&w_.expert_layout, experts_, next, &stats_, &timer_, interrupt_};
      DF_RETURN_IF_ERROR(
          MoeForward(c_, lw.moe, i, access, normed_.data(), n, &ffn_scratch_, sublayer_.data()));
      if (observer_) {
        const int64_t k = c_.num_experts_per_token;
        for (int64_t t = 0; t < n; ++t) {
          observer_->OnRoute(position_ + t, i,
                             {ffn_scratch_.ids.data() + t * k, static_cast<size_t>(k)},
                             {ffn_scratch_.weights.data() + t * k, static_cast<size_t>(k)});
        }
      }
    } else {
      GatedFfnForward(c_, lw.dense, normed_.data(), n, &ffn_scratch_, sublayer_.data());
      timer_.Charge(OpFamily::kDenseFfn);
    }
    Emit(n, i, "ffn_out", sublayer_.data(), h);
    timer_.Charge(OpFamily::kOther);
    for (int64_t j = 0; j < n * h; ++j)
      partial_[static_cast<size_t>(j)] += sublayer_[static_cast<size_t>(j)];
    timer_.Charge(OpFamily::kAttnRes);
    Emit(n, i, "layer_out", partial_.data(), h);
    timer_.Charge(OpFamily::kOther);
    // Lookahead from the layer output: the next layer's FFN input as if its attention added
    // nothing (AttnRes mix and norm of the next layer on the current state), routed by the next
    // layer's router. Only a guess; the real routing happens when that layer runs.
    const bool late = lookahead_ == Lookahead::kLayerOutput || lookahead_ == Lookahead::kBoth;
    if (experts_->takes_guesses() && late && i + 1 < c_.num_hidden_layers &&
        w_.layers[static_cast<size_t>(i + 1)].is_moe) {
      // The guess runs the next layer's router, so a streamed spine takes that layer now.
      DF_RETURN_IF_ERROR(AcquireSpine(i + 1));
      const LayerWeights& next = Layer(i + 1);
      Mix(next.mlp_res_query, n, n_anchors, mixed_.data());
      RmsNormRows(mixed_.data(), next.post_attn_norm.data(), n, h, c_.rms_norm_eps, normed_.data());
      timer_.Charge(OpFamily::kAttnRes);
      const ExpertAccess access{&w_.expert_layout, experts_, nullptr, &stats_, &timer_};
      PrefetchGuess(c_, next.moe, i + 1, access, normed_.data(), n, &ffn_scratch_);
    }
  }

  DF_RETURN_IF_ERROR(AcquireSpine(spine_->tail_group()));
  // Only the logits asked for: every position's, the last one's, or none (a prefill wave that
  // is not the prompt's last). The lm_head group is still taken, so a streamed spine's ring
  // keeps its cyclic order.
  if (logits != nullptr && all_positions) {
    for (int64_t t = 0; t < n; ++t) Tail(t, n_anchors, logits + t * c_.vocab_size);
  } else if (logits != nullptr) {
    Tail(n - 1, n_anchors, logits);
  }
  position_ += n;
  stats_.positions += static_cast<uint64_t>(n);
  stats_.forward_calls += 1;
  timer_.Charge(OpFamily::kOther);
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stats_.compute_seconds += wall - (stats_.io_wait_seconds - io_wait_before);
  return Status::Ok();
}

Status ForwardPass::Verify(const int32_t* tokens, int64_t n, float* logits) {
  if (n < 1 || n > max_verify_rows_) {
    return Status::Error("verify rows " + std::to_string(n) + " outside [1, " +
                         std::to_string(max_verify_rows_) + "] (the session's max draft + 1)");
  }
  const int64_t start = position_;
  verifying_ = true;
  Status st = Run(tokens, n, true, logits);
  verifying_ = false;
  if (!st.ok()) {
    // A failed pass may have advanced some layers: the sequence is no longer usable as is.
    for (auto& r : rollback_) r.rows = 0;
    return st;
  }
  pending_rows_ = n;
  pending_start_ = start;
  return Status::Ok();
}

Status ForwardPass::Commit(int64_t accepted) {
  if (pending_rows_ == 0) return Status::Error("Commit without a verify pass");
  if (accepted < 0 || accepted >= pending_rows_) {
    return Status::Error("Commit keeps rows 0.." + std::to_string(accepted) + " of a pass of " +
                         std::to_string(pending_rows_));
  }
  timer_.Start(&stats_);
  for (int64_t i = 0; i < c_.num_hidden_layers; ++i) {
    if (c_.layer_kinds[static_cast<size_t>(i)] == AttentionKind::kKda) {
      KdaRollbackTo(c_, accepted, &rollback_[static_cast<size_t>(i)],
                    &kda_[static_cast<size_t>(i)]);
    } else {
      mla_[static_cast<size_t>(i)].length = pending_start_ + accepted + 1;
    }
  }
  // Rows past `accepted` were fed but are not part of the sequence.
  stats_.positions -= static_cast<uint64_t>(pending_rows_ - accepted - 1);
  position_ = pending_start_ + accepted + 1;
  pending_rows_ = 0;
  timer_.Charge(OpFamily::kKdaRecurrence);
  return Status::Ok();
}

uint64_t ForwardPass::rollback_bytes_per_row() const {
  uint64_t total = 0;
  for (int64_t i = 0; i < c_.num_hidden_layers; ++i) {
    if (c_.layer_kinds[static_cast<size_t>(i)] == AttentionKind::kKda && max_verify_rows_ > 0) {
      total += KdaRollback::BytesPerRow(c_, rollback_[static_cast<size_t>(i)].mode);
    }
  }
  return total;
}

}  // namespace deltafin
