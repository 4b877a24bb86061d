// Router-trace analysis for `deltafin trace-stats` (docs/TRACE.md): reads router_trace.jsonl (the
// schema is in trace/router_trace.h) and computes
//   - consecutive-token expert overlap: for layer L and token t >= 1,
//     |S(t,L) ∩ S(t-1,L)| / |S(t,L)| where S is the set of routed experts; mean over t per layer,
//     and over all (t, L) overall;
//   - per-layer usage spread over the experts seen anywhere in the trace (E = distinct expert ids
//     over all layers): distinct experts used, max usage count / mean usage count (mean =
//     accesses / E), and the usage entropy normalised by ln E (1 = uniform over E experts);
//   - the hit-rate curve of an LRU cache of 1..N (layer, expert) entries replayed on the trace in
//     order (each token's accesses layer by layer, in selection order), for every size at once via
//     LRU stack distances (Mattson et al.): an access hits a cache of size c iff fewer than c
//     distinct keys were accessed since the previous access to the same key.
#pragma once

#include <cstdint>
#include <istream>
#include <string>
#include <vector>

#include "base/status.h"

namespace deltafin::trace {

struct TraceLayer {
  int64_t layer = 0;
  std::vector<int32_t> experts;  // selection order
  std::vector<float> weights;
};

struct TraceToken {
  int64_t position = 0;
  int64_t token = 0;
  std::vector<TraceLayer> layers;  // ascending layer index
};

struct Trace {
  std::vector<TraceToken> tokens;
};

// Parses a trace; `name` prefixes error messages ("FILE:LINE: ..."). Blank lines are skipped.
// Errors: malformed JSON or a missing/mistyped field (naming the line), positions not strictly
// increasing, a layer list not ascending, duplicate experts in one layer, experts and weights of
// different lengths, a token whose layer set differs from the first token's, an empty trace.
Result<Trace> ParseTrace(std::istream& in, const std::string& name);
Result<Trace> ReadTraceFile(const std::string& path);

inline constexpr int32_t kMaxUsageExperts = 1 << 16;

struct LayerStats {
  int64_t layer = 0;
  double overlap = 0;  // mean over tokens 1..T-1; 0 when T < 2
  int64_t distinct_experts = 0;
  double max_mean_ratio = 0;  // max usage count / (accesses at this layer / E)
  double norm_entropy = 0;    // -sum p ln p / ln E; 0 when E < 2
  // The overlap two independent uniform draws of k experts out of E would have: k / E, with k
  // the layer's mean experts per token (the baseline the measured overlap is compared with).
  double chance_overlap = 0;
  // usage[e]: times expert e was routed here, e up to the largest id seen; empty when that id is
  // kMaxUsageExperts or more (a trace of no real model; the heatmap would not be readable).
  std::vector<int64_t> usage;
};

struct TraceStats {
  int64_t num_tokens = 0;
  int64_t num_layers = 0;
  int64_t experts_seen = 0;  // E: distinct expert ids over all layers
  int64_t keys_seen = 0;     // distinct (layer, expert) pairs
  int64_t accesses = 0;      // routed (token, layer, expert) triples
  double overlap = 0;        // mean over all (t >= 1, layer) pairs; 0 when T < 2
  std::vector<LayerStats> layers;
  // lru_hits[c - 1]: hits of an LRU cache of c entries, c = 1..max_cache.
  int64_t max_cache = 0;
  std::vector<int64_t> lru_hits;
  // hits / accesses for a cache of cache_size entries (1..max_cache).
  double HitRate(int64_t cache_size) const;
};

// max_cache <= 0: keys_seen (every larger cache only has the compulsory misses).
TraceStats ComputeTraceStats(const Trace& trace, int64_t max_cache = 0);

// Human-readable report: summary, per-layer table, LRU hit rates at 1, 2, 4, ..., and max_cache.
std::string FormatTraceStats(const TraceStats& stats);
// Everything, including the hit rate at every cache size, as one JSON document.
std::string TraceStatsJson(const TraceStats& stats);
// Three charts in one plain SVG document (trace/trace_svg.cc): the layer × expert usage heatmap,
// the consecutive-token overlap per layer against chance, and the LRU hit-rate curve.
std::string TraceStatsSvg(const TraceStats& stats);

}  // namespace deltafin::trace
