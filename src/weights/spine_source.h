// SpineSource: where the forward pass gets each layer's spine weights — the spine's side of the
// one interface between the model's compute and where its bytes live (issue 12; the routed
// experts' side is weights/expert_source.h).
//
// The spine is read in groups: one per decoder layer (attention, shared experts, router, latent
// projections), then the lm_head (tail_group()). Before computing with a group the pass takes it:
//   Acquire(g)   waits until group g is in RAM and lets the source start on the groups after it
//   layer(i)     the layer's weights as the model must use them (valid until the next Acquire
//                for a streamed group; always for a resident one)
// and before widening a pass's embedding rows it names them (WillReadEmbeddingRows), so a source
// whose embedding table is not held in RAM can have them all read side by side.
// Implementations:
//   ResidentSpine  the bound weights themselves (mapped shards, widened vectors): nothing to wait
//   SpineRing      pinned groups plus a ring of direct-read buffers (weights/spine_ring.h)
// Both hand out the checkpoint's bytes exactly, so results are bit-identical.
#pragma once

#include <cstdint>
#include <span>

#include "base/status.h"
#include "weights/weights.h"

namespace deltafin {

class SpineSource {
 public:
  virtual ~SpineSource() = default;
  // Groups 0..layers-1 are the decoder layers, tail_group() the lm_head.
  virtual int64_t tail_group() const = 0;
  // True when every group is in RAM for good: Acquire never waits, and the pass need not ask.
  virtual bool always_ready() const { return false; }
  // Waits until group g is in RAM. `bytes_read`: what this group cost the disk (0 when it was
  // already there). An I/O error names the layer, tensor, file and offset.
  virtual Status Acquire(int64_t group, uint64_t* bytes_read) = 0;
  virtual const LayerWeights& layer(int64_t i) const = 0;
  virtual const SpineMatrix& lm_head() const = 0;
  // Layer i when it is in RAM already, else null; never waits (the post-attention lookahead).
  virtual const LayerWeights* ReadyLayer(int64_t i) = 0;
  // The pass is about to read the embedding rows of `tokens` (ids already checked). Never waits;
  // the rows are read from ModelWeights::embed_tokens either way.
  virtual void WillReadEmbeddingRows(std::span<const int32_t> /*tokens*/) {}
};

// The bound weights, all in RAM (or the page cache).
class ResidentSpine final : public SpineSource {
 public:
  explicit ResidentSpine(const ModelWeights& weights) : w_(weights) {}
  int64_t tail_group() const override { return w_.config.num_hidden_layers; }
  bool always_ready() const override { return true; }
  Status Acquire(int64_t /*group*/, uint64_t* bytes_read) override {
    *bytes_read = 0;
    return Status::Ok();
  }
  const LayerWeights& layer(int64_t i) const override { return w_.layers[static_cast<size_t>(i)]; }
  const SpineMatrix& lm_head() const override { return w_.lm_head; }
  const LayerWeights* ReadyLayer(int64_t i) override { return &w_.layers[static_cast<size_t>(i)]; }

 private:
  const ModelWeights& w_;
};

}  // namespace deltafin
