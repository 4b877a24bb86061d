// The SVG charts (report/svg.h) and the trace-stats pictures (TraceStatsSvg): every document is
// well-formed XML by Python's xml.etree (a parser that is not ours), and it holds the expected
// series: one bar segment per non-zero value, one marker per bar, one heatmap cell per used
// (layer, expert), a line per series, and names escaped rather than breaking the markup.
#include "report/svg.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "trace/trace_stats.h"

namespace deltafin {
namespace {

namespace fs = std::filesystem;

// Parses `svg` with xml.etree and summarises it: the root tag, the chart group ids, the count of
// elements per class attribute, and every <text> string.
nlohmann::json ParseWithPython(const std::string& svg) {
  const fs::path dir = fs::temp_directory_path() / ("deltafin_svg_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path doc = dir / "chart.svg", script = dir / "summary.py";
  std::ofstream(doc) << svg;
  std::ofstream(script) << R"(import collections, json, sys
import xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
ns = '{http://www.w3.org/2000/svg}'
classes = collections.Counter(e.get('class') for e in root.iter() if e.get('class'))
print(json.dumps({'root': root.tag, 'charts': [g.get('id') for g in root.iter(ns + 'g')],
                  'classes': classes, 'texts': [t.text for t in root.iter(ns + 'text')],
                  'titles': [t.text for t in root.iter(ns + 'title')],
                  'scripts': len(list(root.iter(ns + 'script')))}))
)";
  const std::string cmd = "python3 " + script.string() + " " + doc.string() + " 2>&1";
  std::string out;
  std::FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return nullptr;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  const int status = ::pclose(pipe);
  fs::remove_all(dir);
  EXPECT_EQ(status, 0) << out;
  nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << out;
  return j;
}

bool Contains(const nlohmann::json& list, const std::string& s) {
  for (const auto& v : list) {
    if (v.is_string() && v.get<std::string>() == s) return true;
  }
  return false;
}

TEST(Svg, StackedBarsAreWellFormedWithEverySegmentAndMark) {
  report::StackedBars bars;
  bars.id = "steps";
  bars.title = "time <per> token & more";  // must be escaped
  bars.series = {"expert_io_wait", "routed_experts", "other"};
  bars.bar_labels = {"10", "11", "12"};
  bars.values = {{0.5, 1.0, 0.01}, {0.0, 1.2, 0.02}, {0.4, 0.9, 0.0}};
  bars.marks = {1.1, 1.0, -1};  // the third bar has no floor
  bars.mark_label = "floor";
  report::Svg svg(900, 400);
  report::DrawStackedBars(svg, bars, {0, 0, 900, 400});
  const nlohmann::json j = ParseWithPython(svg.Finish());
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["root"], "{http://www.w3.org/2000/svg}svg");
  EXPECT_EQ(j["scripts"], 0);
  EXPECT_TRUE(Contains(j["charts"], "steps"));
  EXPECT_TRUE(Contains(j["texts"], "time <per> token & more"));
  for (const auto& name : bars.series) EXPECT_TRUE(Contains(j["texts"], name)) << name;
  // Segments (plus one legend square per series): 3 + 1 + 2 non-zero per series.
  EXPECT_EQ(j["classes"]["series-0"], 2 + 1);
  EXPECT_EQ(j["classes"]["series-1"], 3 + 1);
  EXPECT_EQ(j["classes"]["series-2"], 2 + 1);
  EXPECT_EQ(j["classes"]["mark"], 2 + 1);  // two bars' floors and the legend's
  EXPECT_TRUE(Contains(j["titles"], "11: routed_experts 1.2"));
}

TEST(Svg, LineChartAndHeatmapHandleEmptyAndLogAxes) {
  report::Svg svg(800, 800);
  report::LineChart empty;
  empty.id = "empty";
  report::DrawLineChart(svg, empty, {0, 0, 800, 300});
  report::LineChart log;
  log.id = "log";
  log.log_x = true;
  log.series = {{"a", {{1, 0.1}, {2, 0.5}, {1024, 0.9}}, false}, {"b", {{1, 0.2}}, true}};
  report::DrawLineChart(svg, log, {0, 300, 800, 300});
  report::Heatmap heat;
  heat.id = "heat";
  heat.cells = {{0, 3}, {1, 0}};
  report::DrawHeatmap(svg, heat, {0, 600, 800, 200});
  const nlohmann::json j = ParseWithPython(svg.Finish());
  ASSERT_TRUE(j.is_object());
  EXPECT_TRUE(Contains(j["texts"], "no data"));
  EXPECT_EQ(j["classes"]["series-0"], 1 + 3 + 1);  // line, points, legend
  EXPECT_EQ(j["classes"]["series-1"], 1 + 1 + 1);
  EXPECT_EQ(j["classes"]["cell"], 2);         // the non-zero cells
  EXPECT_TRUE(Contains(j["texts"], "1024"));  // the last power-of-two tick
}

TEST(Svg, TraceStatsPicturesHoldHeatmapOverlapAndLru) {
  // 3 tokens over MoE layers 1 and 2, two experts each, expert ids 0..5.
  trace::Trace t;
  const int32_t routes[3][2][2] = {{{0, 1}, {2, 3}}, {{0, 4}, {2, 3}}, {{5, 1}, {3, 2}}};
  for (int tok = 0; tok < 3; ++tok) {
    trace::TraceToken tt;
    tt.position = tok;
    for (int l = 0; l < 2; ++l) {
      tt.layers.push_back({l + 1, {routes[tok][l][0], routes[tok][l][1]}, {0.5f, 0.5f}});
    }
    t.tokens.push_back(tt);
  }
  const trace::TraceStats stats = trace::ComputeTraceStats(t);
  ASSERT_EQ(stats.layers.size(), 2u);
  EXPECT_DOUBLE_EQ(stats.layers[0].chance_overlap, 2.0 / 6.0);
  EXPECT_EQ(stats.layers[0].usage, (std::vector<int64_t>{2, 2, 0, 0, 1, 1}));
  const nlohmann::json j = ParseWithPython(trace::TraceStatsSvg(stats));
  ASSERT_TRUE(j.is_object());
  for (const char* id : {"usage-heatmap", "overlap", "lru"}) {
    EXPECT_TRUE(Contains(j["charts"], id)) << id;
  }
  // Used (layer, expert) cells: layer 1 uses 0, 1, 4, 5; layer 2 uses 2, 3.
  EXPECT_EQ(j["classes"]["cell"], 6);
  EXPECT_TRUE(Contains(j["texts"], "chance (k / E)"));
  EXPECT_TRUE(Contains(j["titles"], "layer 1, expert 0: 2 uses"));
  // Overlap (measured, chance: 2 layers each, plus line and legend) and the LRU curve, whose
  // series-0 shares the class with the overlap chart's measured line.
  EXPECT_EQ(j["classes"]["series-1"], 1 + 2 + 1);
  EXPECT_EQ(j["classes"]["series-0"], (1 + 2 + 1) + (1 + stats.max_cache + 1));
}

}  // namespace
}  // namespace deltafin
