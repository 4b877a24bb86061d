// Plain SVG charts for `trace-stats --svg` and `bench decode --svg` (docs/BREAKDOWN.md,
// docs/TRACE.md): stacked bars, a heatmap and line charts, written as static SVG 1.1 (no script,
// no external resources) that any browser or image viewer shows.
//
// A Svg is one document; each Draw* function draws one titled chart (axes, ticks, legend) into a
// panel of it, so a report is several panels stacked in one file. Hovering a bar segment, cell or
// point shows its exact value through a <title> child, which browsers display as a tooltip.
// Every element of a data series carries class="series-N" (N = the series index), and every chart
// a <g class="chart" id="..."> group, so tests (and CSS) can find them.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace deltafin::report {

// &, <, >, " and ' as XML entities.
std::string XmlEscape(std::string_view text);

class Svg {
 public:
  Svg(double width, double height);
  void Rect(double x, double y, double w, double h, std::string_view fill,
            std::string_view css_class = {}, std::string_view tooltip = {});
  void Line(double x1, double y1, double x2, double y2, std::string_view stroke, double width,
            bool dashed = false, std::string_view css_class = {});
  void Polyline(const std::vector<std::pair<double, double>>& points, std::string_view stroke,
                double width, bool dashed, std::string_view css_class);
  void Circle(double cx, double cy, double r, std::string_view fill, std::string_view css_class,
              std::string_view tooltip);
  // anchor: "start", "middle" or "end".
  void Text(double x, double y, std::string_view text, double size = 12,
            std::string_view anchor = "start", bool bold = false, double rotate = 0);
  void BeginGroup(std::string_view id);
  void EndGroup();
  // The whole document (closes the root element).
  std::string Finish() const;

 private:
  std::string body_;
  double width_, height_;
};

// A colour per series index, distinguishable for up to 16 series (then repeating).
const char* SeriesColor(size_t index);

// Panel geometry: the chart's outer box in the document.
struct Panel {
  double x = 0, y = 0, width = 800, height = 360;
};

struct StackedBars {
  std::string id, title, y_label, x_label;
  std::vector<std::string> series;          // stack order, bottom first
  std::vector<std::string> bar_labels;      // one per bar (x axis)
  std::vector<std::vector<double>> values;  // [bar][series], >= 0
  // Optional marker per bar (drawn as a short black line across the bar), e.g. the floor; a
  // negative value draws none. `mark_label` names it in the legend.
  std::vector<double> marks;
  std::string mark_label;
};
void DrawStackedBars(Svg& svg, const StackedBars& chart, const Panel& panel);

struct Heatmap {
  std::string id, title, x_label, y_label;
  std::vector<std::string> row_labels;     // y axis, top first
  std::vector<std::vector<double>> cells;  // [row][column], >= 0; columns are 0..n-1
  std::string value_name;                  // for the tooltips and the colour key ("uses")
};
void DrawHeatmap(Svg& svg, const Heatmap& chart, const Panel& panel);

struct LineSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), x ascending
  bool dashed = false;
};
struct LineChart {
  std::string id, title, x_label, y_label;
  std::vector<LineSeries> series;
  bool log_x = false;  // x axis log2-spaced (x values must be > 0)
  double y_min = 0, y_max = 1;
};
void DrawLineChart(Svg& svg, const LineChart& chart, const Panel& panel);

}  // namespace deltafin::report
