#include "report/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>

namespace deltafin::report {

namespace {

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

// A short human number for ticks and tooltips: 3 significant digits.
std::string Short(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

// An axis label: integers as written up to 99999 (cache sizes, layers), then 3 digits.
std::string Tick(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e5) return std::to_string(static_cast<int64_t>(v));
  return Short(v);
}

// 1, 2 or 5 times a power of ten, so that about `ticks` steps cover `span`.
double NiceStep(double span, int ticks) {
  if (span <= 0) return 1;
  const double raw = span / ticks;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0}) {
    if (raw <= m * mag) return m * mag;
  }
  return 10 * mag;
}

std::string ClassAttr(std::string_view css_class) {
  return css_class.empty() ? std::string() : " class=\"" + XmlEscape(css_class) + "\"";
}

std::string SeriesClass(size_t i) { return "series-" + std::to_string(i); }

// The plot area inside a panel: room for the title, the axis labels and a legend on the right.
struct Area {
  double left, top, width, height;
};
Area PlotArea(const Panel& p, double legend_width) {
  return {p.x + 70, p.y + 40, std::max(50.0, p.width - 70 - 20 - legend_width),
          std::max(50.0, p.height - 40 - 55)};
}

void DrawTitleAndLabels(Svg& svg, const Panel& p, const Area& a, const std::string& title,
                        const std::string& x_label, const std::string& y_label) {
  svg.Text(p.x + 10, p.y + 22, title, 15, "start", true);
  svg.Text(a.left + a.width / 2, a.top + a.height + 42, x_label, 12, "middle");
  svg.Text(p.x + 16, a.top + a.height / 2, y_label, 12, "middle", false, -90);
}

// Horizontal grid lines and y tick labels from 0 to y_max (linear).
void DrawYAxis(Svg& svg, const Area& a, double y_min, double y_max) {
  const double step = NiceStep(y_max - y_min, 5);
  for (double v = std::ceil(y_min / step) * step; v <= y_max + step * 1e-9; v += step) {
    const double y = a.top + a.height - (v - y_min) / (y_max - y_min) * a.height;
    svg.Line(a.left, y, a.left + a.width, y, "#dddddd", 1);
    svg.Text(a.left - 6, y + 4, Short(v), 11, "end");
  }
  svg.Line(a.left, a.top + a.height, a.left + a.width, a.top + a.height, "#444444", 1);
  svg.Line(a.left, a.top, a.left, a.top + a.height, "#444444", 1);
}

// A legend of coloured squares (or dashed lines) with names, right of the plot area.
void DrawLegend(Svg& svg, double x, double y, const std::vector<std::string>& names,
                const std::vector<bool>& dashed) {
  for (size_t i = 0; i < names.size(); ++i) {
    const double row = y + static_cast<double>(i) * 17;
    if (i < dashed.size() && dashed[i]) {
      svg.Line(x, row + 5, x + 14, row + 5, SeriesColor(i), 2, true, SeriesClass(i));
    } else {
      svg.Rect(x, row, 12, 12, SeriesColor(i), SeriesClass(i));
    }
    svg.Text(x + 18, row + 10, names[i], 11);
  }
}

}  // namespace

std::string XmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += ch;
    }
  }
  return out;
}

Svg::Svg(double width, double height) : width_(width), height_(height) {}

void Svg::Rect(double x, double y, double w, double h, std::string_view fill,
               std::string_view css_class, std::string_view tooltip) {
  body_ += "<rect x=\"" + Num(x) + "\" y=\"" + Num(y) + "\" width=\"" + Num(std::max(0.0, w)) +
           "\" height=\"" + Num(std::max(0.0, h)) + "\" fill=\"" + XmlEscape(fill) + "\"" +
           ClassAttr(css_class);
  if (tooltip.empty()) {
    body_ += "/>\n";
  } else {
    body_ += "><title>" + XmlEscape(tooltip) + "</title></rect>\n";
  }
}

void Svg::Line(double x1, double y1, double x2, double y2, std::string_view stroke, double width,
               bool dashed, std::string_view css_class) {
  body_ += "<line x1=\"" + Num(x1) + "\" y1=\"" + Num(y1) + "\" x2=\"" + Num(x2) + "\" y2=\"" +
           Num(y2) + "\" stroke=\"" + XmlEscape(stroke) + "\" stroke-width=\"" + Num(width) + "\"" +
           (dashed ? " stroke-dasharray=\"6 4\"" : "") + ClassAttr(css_class) + "/>\n";
}

void Svg::Polyline(const std::vector<std::pair<double, double>>& points, std::string_view stroke,
                   double width, bool dashed, std::string_view css_class) {
  std::string pts;
  for (const auto& [x, y] : points) pts += (pts.empty() ? "" : " ") + Num(x) + "," + Num(y);
  body_ += "<polyline fill=\"none\" points=\"" + pts + "\" stroke=\"" + XmlEscape(stroke) +
           "\" stroke-width=\"" + Num(width) + "\"" + (dashed ? " stroke-dasharray=\"6 4\"" : "") +
           ClassAttr(css_class) + "/>\n";
}

void Svg::Circle(double cx, double cy, double r, std::string_view fill, std::string_view css_class,
                 std::string_view tooltip) {
  body_ += "<circle cx=\"" + Num(cx) + "\" cy=\"" + Num(cy) + "\" r=\"" + Num(r) + "\" fill=\"" +
           XmlEscape(fill) + "\"" + ClassAttr(css_class) + "><title>" + XmlEscape(tooltip) +
           "</title></circle>\n";
}

void Svg::Text(double x, double y, std::string_view text, double size, std::string_view anchor,
               bool bold, double rotate) {
  body_ += "<text x=\"" + Num(x) + "\" y=\"" + Num(y) + "\" font-size=\"" + Num(size) +
           "\" text-anchor=\"" + XmlEscape(anchor) + "\"" + (bold ? " font-weight=\"bold\"" : "") +
           (rotate != 0 ? " transform=\"rotate(" + Num(rotate) + " " + Num(x) + " " + Num(y) + ")\""
                        : "") +
           ">" + XmlEscape(text) + "</text>\n";
}

void Svg::BeginGroup(std::string_view id) {
  body_ += "<g class=\"chart\" id=\"" + XmlEscape(id) + "\">\n";
}
void Svg::EndGroup() { body_ += "</g>\n"; }

std::string Svg::Finish() const {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
         "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" +
         Num(width_) + "\" height=\"" + Num(height_) + "\" viewBox=\"0 0 " + Num(width_) + " " +
         Num(height_) +
         "\" font-family=\"sans-serif\">\n<rect x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" "
         "fill=\"white\"/>\n" +
         body_ + "</svg>\n";
}

const char* SeriesColor(size_t index) {
  // Tableau-like qualitative colours, then darker variants.
  static const char* const kColors[] = {
      "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
      "#9c755f", "#bab0ac", "#1f3b5a", "#8c4a0f", "#7a1f1f", "#2f6b3a", "#5b3a70", "#555555"};
  return kColors[index % (sizeof kColors / sizeof kColors[0])];
}

void DrawStackedBars(Svg& svg, const StackedBars& c, const Panel& p) {
  svg.BeginGroup(c.id);
  const Area a = PlotArea(p, 190);
  double y_max = 0;
  for (size_t b = 0; b < c.values.size(); ++b) {
    double total = 0;
    for (double v : c.values[b]) total += v;
    y_max = std::max(y_max, total);
    if (b < c.marks.size()) y_max = std::max(y_max, c.marks[b]);
  }
  if (y_max <= 0) y_max = 1;
  y_max = std::ceil(y_max / NiceStep(y_max, 5)) * NiceStep(y_max, 5);
  DrawTitleAndLabels(svg, p, a, c.title, c.x_label, c.y_label);
  DrawYAxis(svg, a, 0, y_max);
  const double slot = a.width / std::max<size_t>(1, c.values.size());
  const double bar = std::max(1.0, slot * 0.75);
  const size_t label_every = std::max<size_t>(1, c.values.size() / 20);
  for (size_t b = 0; b < c.values.size(); ++b) {
    const double x = a.left + static_cast<double>(b) * slot + (slot - bar) / 2;
    double base = 0;
    for (size_t s = 0; s < c.values[b].size(); ++s) {
      const double v = c.values[b][s];
      if (v <= 0) continue;
      const double y0 = a.top + a.height - base / y_max * a.height;
      const double y1 = a.top + a.height - (base + v) / y_max * a.height;
      const std::string label = b < c.bar_labels.size() ? c.bar_labels[b] : std::to_string(b);
      svg.Rect(x, y1, bar, y0 - y1, SeriesColor(s), SeriesClass(s),
               label + ": " + (s < c.series.size() ? c.series[s] : "") + " " + Short(v));
      base += v;
    }
    if (b < c.marks.size() && c.marks[b] >= 0) {
      const double y = a.top + a.height - c.marks[b] / y_max * a.height;
      svg.Line(x - slot * 0.1, y, x + bar + slot * 0.1, y, "#000000", 2.5, false, "mark");
    }
    if (b % label_every == 0 && b < c.bar_labels.size()) {
      svg.Text(x + bar / 2, a.top + a.height + 16, c.bar_labels[b], 10, "middle");
    }
  }
  std::vector<std::string> names(c.series.rbegin(), c.series.rend());
  // The legend lists the stack top first, as the bars read; colours follow the series index.
  const double lx = a.left + a.width + 16;
  for (size_t i = 0; i < names.size(); ++i) {
    const size_t s = c.series.size() - 1 - i;
    const double row = a.top + static_cast<double>(i) * 17;
    svg.Rect(lx, row, 12, 12, SeriesColor(s), SeriesClass(s));
    svg.Text(lx + 18, row + 10, names[i], 11);
  }
  if (!c.mark_label.empty()) {
    const double row = a.top + static_cast<double>(names.size()) * 17 + 6;
    svg.Line(lx, row + 5, lx + 14, row + 5, "#000000", 2.5, false, "mark");
    svg.Text(lx + 18, row + 10, c.mark_label, 11);
  }
  svg.EndGroup();
}

void DrawHeatmap(Svg& svg, const Heatmap& c, const Panel& p) {
  svg.BeginGroup(c.id);
  const Area a = PlotArea(p, 90);
  DrawTitleAndLabels(svg, p, a, c.title, c.x_label, c.y_label);
  size_t cols = 0;
  double v_max = 0;
  for (const auto& row : c.cells) {
    cols = std::max(cols, row.size());
    for (double v : row) v_max = std::max(v_max, v);
  }
  const size_t rows = c.cells.size();
  if (rows == 0 || cols == 0 || v_max <= 0) {
    svg.Text(a.left + 10, a.top + 20, "no data", 12);
    svg.EndGroup();
    return;
  }
  const double cw = a.width / static_cast<double>(cols), ch = a.height / static_cast<double>(rows);
  // White (unused) to dark blue (most used), linear in the count.
  const auto color = [&](double v) {
    const double t = std::clamp(v / v_max, 0.0, 1.0);
    const int r = static_cast<int>(255 - t * (255 - 8)), g = static_cast<int>(255 - t * (255 - 48)),
              b = static_cast<int>(255 - t * (255 - 107));
    char buf[8];
    std::snprintf(buf, sizeof buf, "#%02x%02x%02x", r, g, b);
    return std::string(buf);
  };
  // Unused cells are the white background (a real model's map has tens of thousands of cells).
  svg.Rect(a.left, a.top, a.width, a.height, "#ffffff", "background");
  for (size_t r = 0; r < rows; ++r) {
    const double y = a.top + static_cast<double>(r) * ch;
    const std::string name = r < c.row_labels.size() ? c.row_labels[r] : std::to_string(r);
    for (size_t col = 0; col < c.cells[r].size(); ++col) {
      const double v = c.cells[r][col];
      if (v <= 0) continue;
      svg.Rect(a.left + static_cast<double>(col) * cw, y, cw, ch, color(v), "cell",
               name + ", expert " + std::to_string(col) + ": " + Short(v) + " " + c.value_name);
    }
    const size_t label_every = std::max<size_t>(1, rows / 24);
    if (r % label_every == 0) svg.Text(a.left - 6, y + ch / 2 + 4, name, 10, "end");
  }
  const double step = NiceStep(static_cast<double>(cols), 8);
  for (double e = 0; e < static_cast<double>(cols); e += step) {
    svg.Text(a.left + (e + 0.5) * cw, a.top + a.height + 16, Tick(e), 10, "middle");
  }
  svg.Line(a.left, a.top + a.height, a.left + a.width, a.top + a.height, "#444444", 1);
  // Colour key.
  const double kx = a.left + a.width + 16;
  for (int i = 0; i < 10; ++i) {
    const double v = v_max * (9 - i) / 9.0;
    svg.Rect(kx, a.top + i * 14, 14, 14, color(v), "key");
  }
  svg.Text(kx + 20, a.top + 11, Short(v_max) + " " + c.value_name, 10);
  svg.Text(kx + 20, a.top + 9 * 14 + 11, "0", 10);
  svg.EndGroup();
}

void DrawLineChart(Svg& svg, const LineChart& c, const Panel& p) {
  svg.BeginGroup(c.id);
  const Area a = PlotArea(p, 190);
  DrawTitleAndLabels(svg, p, a, c.title, c.x_label, c.y_label);
  double x_min = 0, x_max = 0;
  bool any = false;
  for (const auto& s : c.series) {
    for (const auto& [x, y] : s.points) {
      if (c.log_x && x <= 0) continue;
      x_min = any ? std::min(x_min, x) : x;
      x_max = any ? std::max(x_max, x) : x;
      any = true;
    }
  }
  if (!any) {
    svg.Text(a.left + 10, a.top + 20, "no data", 12);
    svg.EndGroup();
    return;
  }
  const auto tx = [&](double x) { return c.log_x ? std::log2(x) : x; };
  double lo = tx(x_min), hi = tx(x_max);
  if (hi <= lo) hi = lo + 1;
  const auto px = [&](double x) { return a.left + (tx(x) - lo) / (hi - lo) * a.width; };
  const auto py = [&](double y) {
    const double t = (std::clamp(y, c.y_min, c.y_max) - c.y_min) / (c.y_max - c.y_min);
    return a.top + a.height - t * a.height;
  };
  DrawYAxis(svg, a, c.y_min, c.y_max);
  // X ticks: powers of two on a log axis, nice steps on a linear one.
  if (c.log_x) {
    // Every power of two gets a tick; labels thin out so that at most about 10 are written.
    const int powers = static_cast<int>(std::floor(std::log2(x_max)) - std::ceil(lo)) + 1;
    const int label_every = std::max(1, (powers + 9) / 10);
    int index = 0;
    for (double x = std::exp2(std::ceil(lo)); x <= x_max * (1 + 1e-9); x *= 2, ++index) {
      svg.Line(px(x), a.top + a.height, px(x), a.top + a.height + 4, "#444444", 1);
      if (index % label_every == 0) svg.Text(px(x), a.top + a.height + 16, Tick(x), 10, "middle");
    }
  } else {
    const double step = NiceStep(hi - lo, 8);
    for (double x = std::ceil(lo / step) * step; x <= hi + step * 1e-9; x += step) {
      svg.Line(px(x), a.top + a.height, px(x), a.top + a.height + 4, "#444444", 1);
      svg.Text(px(x), a.top + a.height + 16, Tick(x), 10, "middle");
    }
  }
  std::vector<std::string> names;
  std::vector<bool> dashed;
  for (size_t i = 0; i < c.series.size(); ++i) {
    const LineSeries& s = c.series[i];
    names.push_back(s.name);
    dashed.push_back(s.dashed);
    std::vector<std::pair<double, double>> pts;
    for (const auto& [x, y] : s.points) {
      if (c.log_x && x <= 0) continue;
      pts.emplace_back(px(x), py(y));
    }
    svg.Polyline(pts, SeriesColor(i), 2, s.dashed, SeriesClass(i));
    // Points with their values, unless there are too many to hover usefully.
    if (s.points.size() <= 128) {
      for (const auto& [x, y] : s.points) {
        if (c.log_x && x <= 0) continue;
        svg.Circle(px(x), py(y), 2.5, SeriesColor(i), SeriesClass(i),
                   s.name + " at " + Short(x) + ": " + Short(y));
      }
    }
  }
  DrawLegend(svg, a.left + a.width + 16, a.top, names, dashed);
  svg.EndGroup();
}

}  // namespace deltafin::report
