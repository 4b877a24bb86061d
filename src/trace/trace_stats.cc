#include "trace/trace_stats.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <unordered_set>

namespace deltafin::trace {

namespace {

using nlohmann::json;

Result<TraceToken> ParseLine(const std::string& text, const std::string& where) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::Error(where + ": malformed JSON");
  if (!j.is_object()) return Status::Error(where + ": expected a JSON object");
  auto int_field = [&](const json& obj, const char* key, int64_t* out) -> Status {
    auto it = obj.find(key);
    if (it == obj.end() || !it->is_number_integer()) {
      return Status::Error(where + ": '" + key + "' missing or not an integer");
    }
    *out = it->get<int64_t>();
    return Status::Ok();
  };
  TraceToken tok;
  if (Status st = int_field(j, "position", &tok.position); !st.ok()) return st;
  if (Status st = int_field(j, "token", &tok.token); !st.ok()) return st;
  auto layers = j.find("layers");
  if (layers == j.end() || !layers->is_array()) {
    return Status::Error(where + ": 'layers' missing or not an array");
  }
  for (const json& l : *layers) {
    if (!l.is_object()) return Status::Error(where + ": a 'layers' entry is not an object");
    TraceLayer layer;
    if (Status st = int_field(l, "layer", &layer.layer); !st.ok()) return st;
    const std::string lw = where + ": layer " + std::to_string(layer.layer);
    if (layer.layer < 0 || layer.layer > INT32_MAX) return Status::Error(lw + ": bad layer index");
    auto experts = l.find("experts");
    auto weights = l.find("weights");
    if (experts == l.end() || !experts->is_array() || weights == l.end() || !weights->is_array()) {
      return Status::Error(lw + ": 'experts' or 'weights' missing or not an array");
    }
    for (const json& e : *experts) {
      if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() > INT32_MAX) {
        return Status::Error(lw + ": expert ids must be integers in [0, 2^31)");
      }
      const auto id = static_cast<int32_t>(e.get<int64_t>());
      if (std::find(layer.experts.begin(), layer.experts.end(), id) != layer.experts.end()) {
        return Status::Error(lw + ": expert " + std::to_string(id) + " routed twice");
      }
      layer.experts.push_back(id);
    }
    for (const json& w : *weights) {
      if (!w.is_number()) return Status::Error(lw + ": weights must be numbers");
      layer.weights.push_back(w.get<float>());
    }
    if (layer.experts.size() != layer.weights.size()) {
      return Status::Error(lw + ": " + std::to_string(layer.experts.size()) + " experts but " +
                           std::to_string(layer.weights.size()) + " weights");
    }
    if (layer.experts.empty()) return Status::Error(lw + ": no experts");
    if (!tok.layers.empty() && layer.layer <= tok.layers.back().layer) {
      return Status::Error(where + ": layers not in ascending order (layer " +
                           std::to_string(layer.layer) + " after " +
                           std::to_string(tok.layers.back().layer) + ")");
    }
    tok.layers.push_back(std::move(layer));
  }
  return tok;
}

std::string LayerList(const TraceToken& t) {
  std::string s;
  for (const TraceLayer& l : t.layers) s += (s.empty() ? "" : ",") + std::to_string(l.layer);
  return "[" + s + "]";
}

// Fenwick tree over access indices: prefix sums of "this access is the latest of its key".
class Fenwick {
 public:
  explicit Fenwick(size_t n) : tree_(n + 1, 0) {}
  void Add(size_t i, int64_t v) {
    for (++i; i < tree_.size(); i += i & (~i + 1)) tree_[i] += v;
  }
  int64_t Prefix(size_t n) const {  // sum of [0, n)
    int64_t s = 0;
    for (; n > 0; n -= n & (~n + 1)) s += tree_[n];
    return s;
  }

 private:
  std::vector<int64_t> tree_;
};

}  // namespace

Result<Trace> ParseTrace(std::istream& in, const std::string& name) {
  Trace trace;
  std::string text;
  int64_t line_no = 0;
  while (std::getline(in, text)) {
    ++line_no;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = name + ":" + std::to_string(line_no);
    auto tok = ParseLine(text, where);
    if (!tok.ok()) return tok.status();
    if (!trace.tokens.empty()) {
      const TraceToken& first = trace.tokens.front();
      const TraceToken& prev = trace.tokens.back();
      if (tok->position <= prev.position) {
        return Status::Error(where + ": position " + std::to_string(tok->position) +
                             " does not follow position " + std::to_string(prev.position));
      }
      bool same = tok->layers.size() == first.layers.size();
      for (size_t i = 0; same && i < first.layers.size(); ++i) {
        same = tok->layers[i].layer == first.layers[i].layer;
      }
      if (!same) {
        return Status::Error(where + ": inconsistent layer set " + LayerList(*tok) +
                             " (line of position " + std::to_string(first.position) + " has " +
                             LayerList(first) + ")");
      }
    }
    trace.tokens.push_back(std::move(*tok));
  }
  if (in.bad()) return Status::Error(name + ": read failed");
  if (trace.tokens.empty()) return Status::Error(name + ": empty trace (no token lines)");
  return trace;
}

Result<Trace> ReadTraceFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error(path + ": cannot open trace file");
  return ParseTrace(in, path);
}

double TraceStats::HitRate(int64_t cache_size) const {
  if (accesses == 0 || cache_size < 1 || lru_hits.empty()) return 0;
  const int64_t c = std::min<int64_t>(cache_size, static_cast<int64_t>(lru_hits.size()));
  return static_cast<double>(lru_hits[static_cast<size_t>(c - 1)]) / static_cast<double>(accesses);
}

TraceStats ComputeTraceStats(const Trace& trace, int64_t max_cache) {
  TraceStats s;
  s.num_tokens = static_cast<int64_t>(trace.tokens.size());
  if (trace.tokens.empty()) return s;
  const size_t num_layers = trace.tokens.front().layers.size();
  s.num_layers = static_cast<int64_t>(num_layers);

  // Usage counts per layer, distinct expert ids overall, overlap sums.
  std::vector<std::unordered_map<int32_t, int64_t>> usage(num_layers);
  std::vector<int64_t> layer_accesses(num_layers, 0);
  std::vector<double> overlap_sum(num_layers, 0);
  std::unordered_set<int32_t> experts_seen;
  for (size_t t = 0; t < trace.tokens.size(); ++t) {
    for (size_t l = 0; l < num_layers; ++l) {
      const auto& cur = trace.tokens[t].layers[l].experts;
      for (int32_t e : cur) {
        ++usage[l][e];
        experts_seen.insert(e);
      }
      layer_accesses[l] += static_cast<int64_t>(cur.size());
      if (t > 0) {
        const auto& prev = trace.tokens[t - 1].layers[l].experts;
        int64_t common = 0;
        for (int32_t e : cur) common += std::find(prev.begin(), prev.end(), e) != prev.end();
        overlap_sum[l] += static_cast<double>(common) / static_cast<double>(cur.size());
      }
    }
  }
  s.experts_seen = static_cast<int64_t>(experts_seen.size());
  int32_t max_id = -1;
  for (int32_t e : experts_seen) max_id = std::max(max_id, e);
  const double e_count = static_cast<double>(s.experts_seen);
  const double pairs = static_cast<double>(s.num_tokens - 1);
  double overlap_total = 0;
  for (size_t l = 0; l < num_layers; ++l) {
    LayerStats ls;
    ls.layer = trace.tokens.front().layers[l].layer;
    ls.overlap = s.num_tokens > 1 ? overlap_sum[l] / pairs : 0;
    overlap_total += overlap_sum[l];
    ls.distinct_experts = static_cast<int64_t>(usage[l].size());
    const double total = static_cast<double>(layer_accesses[l]);
    int64_t max_count = 0;
    double h = 0;
    for (const auto& [expert, count] : usage[l]) {
      max_count = std::max(max_count, count);
      const double p = static_cast<double>(count) / total;
      h -= p * std::log(p);
    }
    ls.max_mean_ratio = static_cast<double>(max_count) / (total / e_count);
    ls.norm_entropy = s.experts_seen > 1 ? h / std::log(e_count) : 0;
    ls.chance_overlap = total / static_cast<double>(s.num_tokens) / e_count;
    if (max_id < kMaxUsageExperts) {
      ls.usage.assign(static_cast<size_t>(max_id) + 1, 0);
      for (const auto& [expert, count] : usage[l]) ls.usage[static_cast<size_t>(expert)] = count;
    }
    s.accesses += layer_accesses[l];
    s.layers.push_back(ls);
  }
  s.overlap = s.num_tokens > 1 && num_layers > 0
                  ? overlap_total / (pairs * static_cast<double>(num_layers))
                  : 0;

  // LRU stack distances over the access sequence.
  const auto n = static_cast<size_t>(s.accesses);
  Fenwick latest(n);
  std::unordered_map<uint64_t, size_t> last;  // key -> index of its latest access
  std::vector<int64_t> distance_count;        // distance_count[d]: reuses at stack distance d
  size_t index = 0;
  for (const TraceToken& tok : trace.tokens) {
    for (const TraceLayer& layer : tok.layers) {
      for (int32_t e : layer.experts) {
        const uint64_t key = (static_cast<uint64_t>(layer.layer) << 32) | static_cast<uint32_t>(e);
        auto it = last.find(key);
        if (it != last.end()) {
          // Distinct keys touched strictly after the previous access: their latest accesses.
          const auto d = static_cast<size_t>(latest.Prefix(index) - latest.Prefix(it->second + 1));
          if (distance_count.size() <= d) distance_count.resize(d + 1, 0);
          ++distance_count[d];
          latest.Add(it->second, -1);
          it->second = index;
        } else {
          last.emplace(key, index);
        }
        latest.Add(index, 1);
        ++index;
      }
    }
  }
  s.keys_seen = static_cast<int64_t>(last.size());
  s.max_cache = max_cache > 0 ? max_cache : std::max<int64_t>(s.keys_seen, 1);
  s.lru_hits.assign(static_cast<size_t>(s.max_cache), 0);
  int64_t cumulative = 0;
  for (int64_t c = 1; c <= s.max_cache; ++c) {
    // A cache of c entries hits every reuse at distance < c.
    const auto d = static_cast<size_t>(c - 1);
    if (d < distance_count.size()) cumulative += distance_count[d];
    s.lru_hits[static_cast<size_t>(c - 1)] = cumulative;
  }
  return s;
}

std::string FormatTraceStats(const TraceStats& s) {
  std::string out;
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "tokens %lld, MoE layers %lld, accesses %lld, experts seen %lld, (layer, expert) "
                "keys seen %lld\n",
                static_cast<long long>(s.num_tokens), static_cast<long long>(s.num_layers),
                static_cast<long long>(s.accesses), static_cast<long long>(s.experts_seen),
                static_cast<long long>(s.keys_seen));
  out += buf;
  if (s.num_tokens > 1) {
    std::snprintf(buf, sizeof(buf), "consecutive-token expert overlap: %.4f (mean over layers)\n",
                  s.overlap);
  } else {
    std::snprintf(buf, sizeof(buf), "consecutive-token expert overlap: n/a (one token)\n");
  }
  out += buf;
  out += "\nlayer   overlap  distinct  max/mean  entropy\n";
  for (const LayerStats& l : s.layers) {
    std::snprintf(buf, sizeof(buf), "%5lld  %8.4f  %8lld  %8.3f  %7.4f\n",
                  static_cast<long long>(l.layer), l.overlap,
                  static_cast<long long>(l.distinct_experts), l.max_mean_ratio, l.norm_entropy);
    out += buf;
  }
  out += "\nLRU cache of (layer, expert) entries, replayed in trace order\n";
  out += "  entries      hits  hit rate\n";
  std::vector<int64_t> sizes;  // 1, 2, 4, ... below max_cache, then max_cache
  for (int64_t c = 1; c < s.max_cache; c *= 2) sizes.push_back(c);
  sizes.push_back(s.max_cache);
  for (int64_t c : sizes) {
    std::snprintf(buf, sizeof(buf), "%9lld %9lld  %8.4f\n", static_cast<long long>(c),
                  static_cast<long long>(s.lru_hits[static_cast<size_t>(c - 1)]), s.HitRate(c));
    out += buf;
  }
  return out;
}

std::string TraceStatsJson(const TraceStats& s) {
  nlohmann::ordered_json j;
  j["tokens"] = s.num_tokens;
  j["moe_layers"] = s.num_layers;
  j["accesses"] = s.accesses;
  j["experts_seen"] = s.experts_seen;
  j["keys_seen"] = s.keys_seen;
  j["overlap"] = s.num_tokens > 1 ? nlohmann::ordered_json(s.overlap) : nullptr;
  nlohmann::ordered_json layers = nlohmann::ordered_json::array();
  for (const LayerStats& l : s.layers) {
    nlohmann::ordered_json o;
    o["layer"] = l.layer;
    o["overlap"] = s.num_tokens > 1 ? nlohmann::ordered_json(l.overlap) : nullptr;
    o["distinct_experts"] = l.distinct_experts;
    o["max_mean_ratio"] = l.max_mean_ratio;
    o["norm_entropy"] = l.norm_entropy;
    o["chance_overlap"] = l.chance_overlap;
    o["usage"] = l.usage;
    layers.push_back(std::move(o));
  }
  j["layers"] = std::move(layers);
  nlohmann::ordered_json lru;
  lru["max_cache"] = s.max_cache;
  lru["hits"] = s.lru_hits;  // index c - 1: cache of c entries
  std::vector<double> rates;
  for (int64_t c = 1; c <= s.max_cache; ++c) rates.push_back(s.HitRate(c));
  lru["hit_rate"] = rates;
  j["lru"] = std::move(lru);
  return j.dump(2) + "\n";
}

}  // namespace deltafin::trace
