// `trace-stats --svg`: the router trace's statistics as three charts in one plain SVG
// (report/svg.h): how often each expert was routed per layer, the consecutive-token overlap per
// layer against the overlap of random choices, and the LRU hit rate by cache size.
#include <algorithm>
#include <cmath>
#include <string>

#include "report/svg.h"
#include "trace/trace_stats.h"

namespace deltafin::trace {

std::string TraceStatsSvg(const TraceStats& s) {
  constexpr double kWidth = 960;
  const double heat_height =
      std::clamp(140.0 + 14.0 * static_cast<double>(s.layers.size()), 260.0, 760.0);
  const double line_height = 340;
  report::Svg svg(kWidth, heat_height + 2 * line_height + 20);

  report::Heatmap heat;
  heat.id = "usage-heatmap";
  heat.title = "Expert usage per MoE layer (" + std::to_string(s.num_tokens) + " tokens)";
  heat.x_label = "expert id";
  heat.y_label = "decoder layer";
  heat.value_name = "uses";
  for (const LayerStats& l : s.layers) {
    heat.row_labels.push_back("layer " + std::to_string(l.layer));
    heat.cells.emplace_back(l.usage.begin(), l.usage.end());
  }
  report::DrawHeatmap(svg, heat, {0, 0, kWidth, heat_height});

  report::LineChart overlap;
  overlap.id = "overlap";
  overlap.title = "Consecutive-token expert overlap per layer";
  overlap.x_label = "decoder layer";
  overlap.y_label = "|S(t) ∩ S(t-1)| / |S(t)|";
  report::LineSeries measured{"measured", {}, false}, chance{"chance (k / E)", {}, true};
  for (const LayerStats& l : s.layers) {
    if (s.num_tokens > 1) measured.points.emplace_back(static_cast<double>(l.layer), l.overlap);
    chance.points.emplace_back(static_cast<double>(l.layer), l.chance_overlap);
  }
  overlap.series = {measured, chance};
  report::DrawLineChart(svg, overlap, {0, heat_height, kWidth, line_height});

  report::LineChart lru;
  lru.id = "lru";
  lru.title = "LRU hit rate of a cache of (layer, expert) entries";
  lru.x_label = "cache entries";
  lru.y_label = "hit rate";
  lru.log_x = s.max_cache > 64;
  report::LineSeries curve{"hit rate", {}, false};
  // Every size on a short curve; on a long one sizes about 1/400 of the log range apart (at most
  // a few hundred points however large --max-cache is), the largest included.
  const double factor = std::exp2(std::log2(static_cast<double>(s.max_cache)) / 400.0);
  for (int64_t c = 1; c <= s.max_cache;) {
    curve.points.emplace_back(static_cast<double>(c), s.HitRate(c));
    if (c == s.max_cache) break;
    int64_t next = c + 1;
    if (lru.log_x) {
      next = std::max(next, static_cast<int64_t>(std::ceil(static_cast<double>(c) * factor)));
    }
    c = std::min(next, s.max_cache);
  }
  lru.series = {curve};
  report::DrawLineChart(svg, lru, {0, heat_height + line_height, kWidth, line_height});
  return svg.Finish();
}

}  // namespace deltafin::trace
