// trace-stats analysis (src/trace/trace_stats.h) on hand-made traces whose overlap, usage spread
// and LRU hit rates are worked out by hand in the comments, plus malformed input.
#include "trace/trace_stats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <list>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace deltafin::trace {
namespace {

// One trace line; layers = {layer, experts} (weights are 1/k each).
std::string Line(int64_t position, const std::vector<std::pair<int, std::vector<int>>>& layers) {
  std::string s = "{\"position\": " + std::to_string(position) + ", \"token\": 7, \"layers\": [";
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto& [layer, experts] = layers[i];
    s += (i ? ", " : "") + std::string("{\"layer\": ") + std::to_string(layer) + ", \"experts\": [";
    std::string w;
    for (size_t j = 0; j < experts.size(); ++j) {
      s += (j ? ", " : "") + std::to_string(experts[j]);
      w += (j ? ", " : "") + std::to_string(1.0 / static_cast<double>(experts.size()));
    }
    s += "], \"weights\": [" + w + "]}";
  }
  return s + "]}\n";
}

Result<Trace> Parse(const std::string& text) {
  std::istringstream in(text);
  return ParseTrace(in, "t.jsonl");
}

TEST(TraceStatsTest, SingleLayerAABA) {
  // One layer, k = 1, experts A=5, A, B=6, A.
  auto trace =
      Parse(Line(0, {{1, {5}}}) + Line(1, {{1, {5}}}) + Line(2, {{1, {6}}}) + Line(3, {{1, {5}}}));
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  const TraceStats s = ComputeTraceStats(*trace);
  EXPECT_EQ(s.num_tokens, 4);
  EXPECT_EQ(s.num_layers, 1);
  EXPECT_EQ(s.accesses, 4);
  EXPECT_EQ(s.experts_seen, 2);
  EXPECT_EQ(s.keys_seen, 2);
  // Overlap: t1 {5} vs {5} = 1, t2 {6} vs {5} = 0, t3 {5} vs {6} = 0 -> 1/3.
  EXPECT_DOUBLE_EQ(s.overlap, 1.0 / 3.0);
  ASSERT_EQ(s.layers.size(), 1u);
  EXPECT_DOUBLE_EQ(s.layers[0].overlap, 1.0 / 3.0);
  // Usage 5:3, 6:1; mean over E = 2 experts = 2 -> max/mean 1.5.
  EXPECT_EQ(s.layers[0].distinct_experts, 2);
  EXPECT_DOUBLE_EQ(s.layers[0].max_mean_ratio, 1.5);
  const double h = -(0.75 * std::log(0.75) + 0.25 * std::log(0.25));
  EXPECT_NEAR(s.layers[0].norm_entropy, h / std::log(2.0), 1e-12);
  // LRU 1: A miss, A hit, B miss, A miss -> 1/4. LRU 2: A miss, A hit, B miss, A hit -> 2/4.
  ASSERT_EQ(s.max_cache, 2);
  EXPECT_EQ(s.lru_hits, (std::vector<int64_t>{1, 2}));
  EXPECT_DOUBLE_EQ(s.HitRate(1), 0.25);
  EXPECT_DOUBLE_EQ(s.HitRate(2), 0.5);
}

TEST(TraceStatsTest, TwoLayersByHand) {
  // Layers 1 and 2, k = 2:
  //   t0: L1 {0,1}  L2 {2,3}
  //   t1: L1 {0,2}  L2 {2,3}
  //   t2: L1 {0,1}  L2 {3,0}
  auto trace = Parse(Line(10, {{1, {0, 1}}, {2, {2, 3}}}) + "\n" +  // a blank line is skipped
                     Line(11, {{1, {0, 2}}, {2, {2, 3}}}) + Line(12, {{1, {0, 1}}, {2, {3, 0}}}));
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  const TraceStats s = ComputeTraceStats(*trace);
  EXPECT_EQ(s.num_tokens, 3);
  EXPECT_EQ(s.num_layers, 2);
  EXPECT_EQ(s.accesses, 12);
  EXPECT_EQ(s.experts_seen, 4);  // {0,1,2,3}
  EXPECT_EQ(s.keys_seen, 6);     // (1,0) (1,1) (1,2) (2,0) (2,2) (2,3)
  // L1: {0,2}∩{0,1} = 1/2, {0,1}∩{0,2} = 1/2 -> 0.5. L2: 2/2, {3,0}∩{2,3} = 1/2 -> 0.75.
  ASSERT_EQ(s.layers.size(), 2u);
  EXPECT_EQ(s.layers[0].layer, 1);
  EXPECT_EQ(s.layers[1].layer, 2);
  EXPECT_DOUBLE_EQ(s.layers[0].overlap, 0.5);
  EXPECT_DOUBLE_EQ(s.layers[1].overlap, 0.75);
  EXPECT_DOUBLE_EQ(s.overlap, 0.625);
  // Usage L1: 0:3 1:2 2:1; L2: 3:3 2:2 0:1. 6 accesses over E = 4 -> mean 1.5, max 3 -> 2.
  const double h =
      -(0.5 * std::log(0.5) + 2.0 / 6 * std::log(2.0 / 6) + 1.0 / 6 * std::log(1.0 / 6));
  for (const LayerStats& l : s.layers) {
    EXPECT_EQ(l.distinct_experts, 3);
    EXPECT_DOUBLE_EQ(l.max_mean_ratio, 2.0);
    EXPECT_NEAR(l.norm_entropy, h / std::log(4.0), 1e-12);
  }
  // Accesses: a1 (1,0) a2 (1,1) a3 (2,2) a4 (2,3) | a5 (1,0) a6 (1,2) a7 (2,2) a8 (2,3) |
  //           a9 (1,0) a10 (1,1) a11 (2,3) a12 (2,0).
  // Stack distances (distinct keys since the last use): a5 3, a7 3, a8 3, a9 3, a10 4, a11 2;
  // the other six are first uses. Hits at size c = reuses with distance < c:
  // c=1: 0, 2: 0, 3: 1 (a11), 4: 5, 5: 6, 6: 6.
  ASSERT_EQ(s.max_cache, 6);
  EXPECT_EQ(s.lru_hits, (std::vector<int64_t>{0, 0, 1, 5, 6, 6}));
  EXPECT_DOUBLE_EQ(s.HitRate(4), 5.0 / 12);

  const TraceStats capped = ComputeTraceStats(*trace, 3);
  EXPECT_EQ(capped.lru_hits, (std::vector<int64_t>{0, 0, 1}));
  const TraceStats wide = ComputeTraceStats(*trace, 9);
  EXPECT_EQ(wide.lru_hits, (std::vector<int64_t>{0, 0, 1, 5, 6, 6, 6, 6, 6}));
}

// The stack-distance curve equals a direct LRU simulation at every size on a random trace.
TEST(TraceStatsTest, LruCurveMatchesDirectSimulation) {
  std::mt19937 rng(1234);
  std::string text;
  std::vector<std::pair<int, int>> sequence;  // (layer, expert) in replay order
  for (int t = 0; t < 60; ++t) {
    std::vector<std::pair<int, std::vector<int>>> layers;
    for (int layer = 1; layer <= 3; ++layer) {
      std::vector<int> experts;
      while (experts.size() < 3) {
        const int e = static_cast<int>(rng() % 10);
        if (std::find(experts.begin(), experts.end(), e) == experts.end()) experts.push_back(e);
      }
      for (int e : experts) sequence.emplace_back(layer, e);
      layers.emplace_back(layer, experts);
    }
    text += Line(t, layers);
  }
  auto trace = Parse(text);
  ASSERT_TRUE(trace.ok()) << trace.status().message();
  const TraceStats s = ComputeTraceStats(*trace, 40);
  for (int c = 1; c <= 40; ++c) {
    std::list<std::pair<int, int>> lru;  // front = most recent
    int64_t hits = 0;
    for (const auto& key : sequence) {
      auto it = std::find(lru.begin(), lru.end(), key);
      if (it != lru.end()) {
        ++hits;
        lru.erase(it);
      } else if (static_cast<int>(lru.size()) == c) {
        lru.pop_back();
      }
      lru.push_front(key);
    }
    EXPECT_EQ(s.lru_hits[static_cast<size_t>(c - 1)], hits) << "cache " << c;
  }
}

TEST(TraceStatsTest, OneTokenHasNoOverlap) {
  auto trace = Parse(Line(0, {{3, {1, 2}}}));
  ASSERT_TRUE(trace.ok());
  const TraceStats s = ComputeTraceStats(*trace);
  EXPECT_EQ(s.overlap, 0);
  EXPECT_EQ(s.lru_hits, (std::vector<int64_t>{0, 0}));
  EXPECT_NE(FormatTraceStats(s).find("n/a"), std::string::npos);
  EXPECT_NE(TraceStatsJson(s).find("\"overlap\": null"), std::string::npos);
}

TEST(TraceStatsTest, ReportListsPowersOfTwoAndMax) {
  auto trace = Parse(Line(0, {{1, {0, 1, 2, 3, 4, 5}}}));
  ASSERT_TRUE(trace.ok());
  const std::string report = FormatTraceStats(ComputeTraceStats(*trace));  // max_cache 6
  for (const char* row : {"\n        1 ", "\n        2 ", "\n        4 ", "\n        6 "}) {
    EXPECT_NE(report.find(row), std::string::npos) << row << report;
  }
  EXPECT_EQ(report.find("\n        3 "), std::string::npos) << report;
}

void ExpectError(const std::string& text, const std::string& fragment) {
  auto trace = Parse(text);
  ASSERT_FALSE(trace.ok()) << text;
  EXPECT_NE(trace.status().message().find(fragment), std::string::npos) << trace.status().message();
  EXPECT_EQ(trace.status().message().find('\n'), std::string::npos);  // one line
}

TEST(TraceStatsTest, MalformedInput) {
  const std::string good = Line(0, {{1, {0, 1}}, {2, {2, 3}}});
  ExpectError(good + "{\"position\": 1, \"token\": 2, \"layers\": [\n",
              "t.jsonl:2: malformed JSON");
  ExpectError(good + "\n" + "[1,2]\n", "t.jsonl:3: expected a JSON object");
  ExpectError("{\"token\": 1, \"layers\": []}\n", "t.jsonl:1: 'position' missing");
  ExpectError("{\"position\": 0, \"token\": \"a\", \"layers\": []}\n", "'token' missing or not");
  ExpectError("{\"position\": 0, \"token\": 1}\n", "'layers' missing");
  ExpectError("", "empty trace");
  ExpectError("\n\n", "empty trace");
  // Inconsistent layer sets: a layer missing, a different layer.
  ExpectError(good + Line(1, {{1, {0, 1}}}), "t.jsonl:2: inconsistent layer set [1] ");
  ExpectError(good + Line(1, {{1, {0, 1}}, {3, {2, 3}}}), "inconsistent layer set [1,3]");
  ExpectError(Line(0, {{2, {0}}, {1, {1}}}), "not in ascending order");
  ExpectError(good + Line(0, {{1, {0, 1}}, {2, {2, 3}}}), "t.jsonl:2: position 0 does not follow");
  ExpectError(Line(0, {{1, {4, 4}}}), "expert 4 routed twice");
  ExpectError(Line(0, {{1, {}}}), "no experts");
  ExpectError(
      "{\"position\": 0, \"token\": 1, \"layers\": [{\"layer\": 1, \"experts\": [1, 2], "
      "\"weights\": [0.5]}]}\n",
      "2 experts but 1 weights");
  ExpectError(
      "{\"position\": 0, \"token\": 1, \"layers\": [{\"layer\": 1, \"experts\": [-1], "
      "\"weights\": [0.5]}]}\n",
      "expert ids must be integers");
}

TEST(TraceStatsTest, MissingFile) {
  auto trace = ReadTraceFile("/nonexistent/router_trace.jsonl");
  ASSERT_FALSE(trace.ok());
  EXPECT_NE(trace.status().message().find("cannot open"), std::string::npos);
}

}  // namespace
}  // namespace deltafin::trace
