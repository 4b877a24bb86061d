// ExpertSource: where the MoE block gets the bytes of the routed experts it runs — the one
// interface between the model's compute and the ways an expert's span reaches RAM (issue 12).
//
// A MoE layer asks for a set of experts and computes each as soon as its bytes are in RAM:
//   Begin(layer, experts)   holds experts[0..m) of the layer and starts bringing in missing ones
//   Prefetch(layer', ...)   a guess of a later layer's experts (sources already in RAM ignore it)
//   WaitAny()               an expert of the set whose bytes are in RAM, and its span
//   End()                   releases the set
// The span is the expert's six tensors back to back (weights/weights.h, ExpertLayout; docs/MODEL.md
// §2.8) and stays valid until End(). Implementations:
//   MappedExperts    the shards' mapped bytes (every expert in RAM or the page cache)
//   ExpertStreamer   direct reads into a byte-budgeted slot cache (weights/expert_streamer.h)
//   FetchingExperts  a stream install: missing experts are fetched over HTTP into the local
//                    shard files first, then read through the source it wraps
// The model computes on the spans and never knows which of these produced them, so every source
// gives bit-identical results. None allocates after construction.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "deltafin/engine.h"
#include "deltafin/expert_fetcher.h"
#include "weights/weights.h"

namespace deltafin {

class ExpertSource {
 public:
  struct Ready {
    int64_t index;  // position in the Begin list
    const uint8_t* data;
  };
  virtual ~ExpertSource() = default;
  // Most experts one Begin may hold.
  virtual int64_t max_batch() const = 0;
  // Holds experts[0..m) of `layer` (m <= max_batch(), distinct; the span must outlive End()).
  // Fails only when a missing expert cannot be made local (a stream install's fetch).
  virtual Status Begin(int64_t layer, std::span<const int32_t> experts, SessionStats* stats) = 0;
  // Blocks until some expert of the current Begin that no WaitAny returned yet is in RAM and
  // returns it. An expert whose read failed is returned as that error.
  virtual Result<Ready> WaitAny(SessionStats* stats) = 0;
  virtual void End() = 0;
  // True when every expert is in RAM for good: WaitAny never waits on a read (its time is then
  // compute, not I/O wait).
  virtual bool always_ready() const { return false; }
  // Whether guesses help: true when experts are read from disk on demand.
  virtual bool takes_guesses() const { return false; }
  virtual void Prefetch(int64_t /*layer*/, std::span<const int32_t> /*experts*/,
                        SessionStats* /*stats*/) {}
};

// Every expert's span in the mapped shards: Begin counts the loads (all hits), WaitAny hands the
// experts out in Begin order.
class MappedExperts final : public ExpertSource {
 public:
  explicit MappedExperts(const ModelWeights& weights) : w_(weights) {}
  int64_t max_batch() const override { return w_.config.num_experts; }
  bool always_ready() const override { return true; }
  Status Begin(int64_t layer, std::span<const int32_t> experts, SessionStats* stats) override;
  Result<Ready> WaitAny(SessionStats* stats) override;
  void End() override { experts_ = {}; }

 private:
  const ModelWeights& w_;
  int64_t layer_ = -1;
  std::span<const int32_t> experts_;
  int64_t next_ = 0;
};

// A stream install: Begin asks the fetcher to make the set's missing experts local (all of them
// at once, fetched concurrently), then begins the set on `inner`, which reads the local files.
class FetchingExperts final : public ExpertSource {
 public:
  FetchingExperts(ExpertFetcher* fetcher, ExpertSource* inner, int64_t num_experts)
      : fetcher_(fetcher), inner_(inner), scratch_(static_cast<size_t>(num_experts)) {}
  int64_t max_batch() const override { return inner_->max_batch(); }
  Status Begin(int64_t layer, std::span<const int32_t> experts, SessionStats* stats) override;
  Result<Ready> WaitAny(SessionStats* stats) override { return inner_->WaitAny(stats); }
  // Begin may wait on a fetch.
  void End() override { inner_->End(); }
  bool takes_guesses() const override { return inner_->takes_guesses(); }
  // A guess is never fetched (a wrong one would cost a download): only guesses already local
  // are passed on, since reading a missing expert would read the hole in its place.
  void Prefetch(int64_t layer, std::span<const int32_t> experts, SessionStats* stats) override;

 private:
  ExpertFetcher* fetcher_;
  ExpertSource* inner_;
  std::vector<int32_t>
      scratch_;  // [num_experts] one Begin's missing or one Prefetch's local experts
};

}  // namespace deltafin
