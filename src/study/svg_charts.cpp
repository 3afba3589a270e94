// Inline SVG line and bar charts (see svg_charts.h).
#include "study/svg_charts.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "study/text_format.h"

namespace mixp::study::detail {
namespace {

constexpr const char* kAxis = "#4b5563";  // axis lines and tick labels (7.6:1 on white)
constexpr const char* kGrid = "#e5e7eb";
constexpr const char* kText = "#1f2937";
constexpr const char* kRed = "#b91c1c";  // divergence marks (6.5:1 on white)
constexpr int kMaxPointsPerSeries = 700;

std::string esc(std::string_view s) {
  return html_escape(s);
}

// Approximate width of `s` in px at `font_px` (system sans-serif, average glyph ~0.56 em).
double text_width(std::string_view s, double font_px) {
  double n = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if ((c & 0xC0) == 0x80) continue;  // UTF-8 continuation byte
    n += 1;
  }
  return n * font_px * 0.56;
}

std::string tick_label(double v, double step) {
  if (v == 0) return "0";
  if (std::fabs(v) >= 1e5) return format_number(v, 3);
  // As many decimals as the step needs to be exact (0.25 -> 2), so ticks never read rounded.
  int decimals = 0;
  double a = std::fabs(step);
  while (decimals < 6) {
    double scaled = a * std::pow(10.0, decimals);
    if (std::fabs(scaled - std::round(scaled)) < 1e-6 * std::max(1.0, scaled)) break;
    ++decimals;
  }
  std::string s = fmt::format("{:.{}f}", v, decimals);
  if (s[0] == '-') s = "\u2212" + s.substr(1);
  return s;
}

// Mean of each of kMaxPointsPerSeries buckets when a series is longer; NaN-only buckets stay NaN
// so that a divergence still breaks the line.
std::vector<ChartPoint> thin(const std::vector<ChartPoint>& pts) {
  if (pts.size() <= size_t(kMaxPointsPerSeries)) return pts;
  std::vector<ChartPoint> out;
  const double per = double(pts.size()) / kMaxPointsPerSeries;
  for (int b = 0; b < kMaxPointsPerSeries; ++b) {
    size_t lo = size_t(b * per), hi = std::min(pts.size(), size_t((b + 1) * per));
    if (lo >= hi) continue;
    double sx = 0, sy = 0;
    int n = 0;
    for (size_t i = lo; i < hi; ++i) {
      if (!std::isfinite(pts[i].y)) continue;
      sx += pts[i].x;
      sy += pts[i].y;
      ++n;
    }
    if (n) {
      out.push_back({sx / n, sy / n});
    } else {
      out.push_back({pts[lo].x, std::numeric_limits<double>::quiet_NaN()});
    }
  }
  return out;
}

std::string svg_open(const std::string& id, int w, int h, const std::string& title,
                     const std::string& desc) {
  return fmt::format(
      "<svg class=\"chart\" id=\"{0}\" viewBox=\"0 0 {1} {2}\" width=\"{1}\" height=\"{2}\" "
      "role=\"img\" aria-labelledby=\"{0}-title {0}-desc\">\n"
      "<title id=\"{0}-title\">{3}</title>\n<desc id=\"{0}-desc\">{4}</desc>\n",
      esc(id), w, h, esc(title), esc(desc));
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int count) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) return {};
  if (hi < lo) std::swap(lo, hi);
  if (hi == lo) {
    double pad = lo == 0 ? 1 : std::fabs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  double raw = (hi - lo) / std::max(1, count);
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  }
  std::vector<double> t;
  double first = std::floor(lo / step + 1e-9) * step;
  for (double v = first; v <= hi + step * 0.5 + 1e-12 && t.size() < 50; v += step) {
    t.push_back(std::fabs(v) < step * 1e-9 ? 0.0 : v);
  }
  if (!t.empty() && t.back() < hi - 1e-12 * std::fabs(hi)) t.push_back(t.back() + step);
  return t;
}

int smoothing_window(size_t points) {
  if (points < 40) return 1;
  return int(points / 20) | 1;  // odd: centred
}

std::vector<ChartPoint> smooth_points(const std::vector<ChartPoint>& pts, int window) {
  if (window <= 1) return pts;
  const ptrdiff_t half = window / 2, n = ptrdiff_t(pts.size());
  std::vector<ChartPoint> out(pts.size());
  for (ptrdiff_t i = 0; i < n; ++i) {
    out[size_t(i)] = pts[size_t(i)];
    if (!std::isfinite(pts[size_t(i)].y)) continue;
    double sum = 0;
    int count = 0;
    for (ptrdiff_t j = std::max<ptrdiff_t>(0, i - half); j <= std::min(n - 1, i + half); ++j) {
      if (std::isfinite(pts[size_t(j)].y)) {
        sum += pts[size_t(j)].y;
        ++count;
      }
    }
    out[size_t(i)].y = sum / count;
  }
  return out;
}

std::string render_line_chart(const LineChart& c) {
  const int W = c.width, H = c.height;
  const double left = 66, right = 24, bottom = 50;
  // Legend rows at the top: wrap when the items do not fit on one line.
  struct Item {
    const LineSeries* s;
    double x, y;
  };
  std::vector<Item> legend;
  double lx = left, ly = 18;
  for (const LineSeries& s : c.series) {
    double w = 30 + text_width(s.label, 13) + 22;
    if (lx + w > W - right && lx > left) {
      lx = left;
      ly += 20;
    }
    legend.push_back({&s, lx, ly});
    lx += w;
  }
  const double top = ly + 22;
  const double pw = W - left - right, ph = H - top - bottom;

  // Data ranges over finite points (and crosses).
  double xmin = std::numeric_limits<double>::infinity(), xmax = -xmin;
  double ymin = xmin, ymax = -xmin;
  std::vector<std::vector<ChartPoint>> thinned;
  for (const LineSeries& s : c.series) {
    thinned.push_back(thin(s.points));
    auto consider = [&](const ChartPoint& p) {
      if (!std::isfinite(p.x) || !std::isfinite(p.y)) return;
      if (c.log2_y && p.y <= 0) return;
      xmin = std::min(xmin, p.x);
      xmax = std::max(xmax, p.x);
      ymin = std::min(ymin, p.y);
      ymax = std::max(ymax, p.y);
    };
    for (const ChartPoint& p : s.points) consider(p);
    if (s.cross) consider(*s.cross);
  }
  std::string o = svg_open(c.id, W, H, c.title, c.description);
  if (!std::isfinite(xmin)) {
    o += fmt::format(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"{}\" "
        "font-size=\"14\">No finite values to plot</text>\n</svg>\n",
        W / 2, H / 2, kAxis);
    return o;
  }
  if (xmax == xmin) xmax = xmin + 1;

  // Y axis: linear nice ticks, or powers of two.
  std::vector<double> yt;
  double y0, y1;
  if (c.log2_y) {
    int e0 = int(std::floor(std::log2(ymin))), e1 = int(std::ceil(std::log2(ymax)));
    if (e1 == e0) e1 = e0 + 1;
    int stride = std::max(1, (e1 - e0 + 5) / 6);
    for (int e = e0; e <= e1; e += stride) yt.push_back(e);
    if (yt.back() < e1) yt.push_back(yt.back() + stride);
    y0 = yt.front();
    y1 = yt.back();
  } else {
    double pad = (ymax - ymin) * 0.04;
    yt = nice_ticks(ymin - pad, ymax + pad, 6);
    if (ymin >= 0 && !yt.empty() && yt.front() < 0) yt.erase(yt.begin());
    if (yt.empty()) yt = {ymin, ymax};
    y0 = std::min(yt.front(), ymin);
    y1 = std::max(yt.back(), ymax);
  }
  std::vector<double> xt = nice_ticks(xmin, xmax, 8);
  while (!xt.empty() && xt.front() < xmin - 1e-9) xt.erase(xt.begin());
  while (!xt.empty() && xt.back() > xmax + 1e-9) xt.pop_back();

  auto sx = [&](double x) { return left + (x - xmin) / (xmax - xmin) * pw; };
  auto sy = [&](double y) {
    double v = c.log2_y ? std::log2(y) : y;
    return top + ph - (v - y0) / (y1 - y0) * ph;
  };
  auto sy_tick = [&](double t) { return top + ph - (t - y0) / (y1 - y0) * ph; };

  // Grid and y ticks.
  o += "<g class=\"grid\">\n";
  for (double t : yt) {
    double y = sy_tick(t);
    o += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\"/>\n", left, y,
        left + pw, y, kGrid);
    if (c.log2_y) {
      o += fmt::format(
          "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\" font-size=\"12\" fill=\"{}\">"
          "2<tspan dy=\"-6\" font-size=\"9\">{}</tspan></text>\n",
          left - 10, y + 4, kAxis, int(t));
    } else {
      o += fmt::format(
          "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\" font-size=\"12\" "
          "fill=\"{}\">{}</text>\n",
          left - 8, y + 4, kAxis, tick_label(t, yt.size() > 1 ? yt[1] - yt[0] : 1));
    }
  }
  o += "</g>\n";
  // X axis.
  o +=
      fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\"/>\n",
                  left, top + ph, left + pw, top + ph, kAxis);
  for (double t : xt) {
    double x = sx(t);
    o += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\"/>\n", x,
        top + ph, x, top + ph + 5, kAxis);
    o += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" font-size=\"12\" "
        "fill=\"{}\">{}</text>\n",
        x, top + ph + 19, kAxis,
        t >= 10000 ? format_count(int64_t(std::llround(t)))
                   : tick_label(t, xt.size() > 1 ? xt[1] - xt[0] : 1));
  }
  o += fmt::format(
      "<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\" font-size=\"13\" fill=\"{}\">{}</text>\n",
      left + pw / 2, H - 10, kText, esc(c.x_label));
  o += fmt::format(
      "<text transform=\"translate(16 {:.1f}) rotate(-90)\" text-anchor=\"middle\" "
      "font-size=\"13\" fill=\"{}\">{}</text>\n",
      top + ph / 2, kText, esc(c.y_label));

  // Series.
  for (size_t i = 0; i < c.series.size(); ++i) {
    const LineSeries& s = c.series[i];
    std::string d;
    bool pen_down = false;
    double prev_y = 0;
    for (const ChartPoint& p : thinned[i]) {
      bool ok = std::isfinite(p.x) && std::isfinite(p.y) && (!c.log2_y || p.y > 0);
      if (!ok) {
        pen_down = false;
        continue;
      }
      if (pen_down && c.steps) d += fmt::format("L{:.1f} {:.1f} ", sx(p.x), prev_y);
      d += fmt::format("{}{:.1f} {:.1f} ", pen_down ? "L" : "M", sx(p.x), sy(p.y));
      prev_y = sy(p.y);
      pen_down = true;
    }
    o += fmt::format(
        "<path class=\"series\" d=\"{}\" fill=\"none\" stroke=\"{}\" "
        "stroke-width=\"2.2\" stroke-linejoin=\"round\" stroke-linecap=\"round\"{}>"
        "<title>{}</title></path>\n",
        d, esc(s.color), s.dash.empty() ? "" : fmt::format(" stroke-dasharray=\"{}\"", esc(s.dash)),
        esc(s.label));
    if (s.cross) {
      double x = sx(s.cross->x), y = sy(s.cross->y);
      o += fmt::format(
          "<g class=\"diverged-mark\" stroke=\"{0}\" stroke-width=\"3\" stroke-linecap=\"round\">"
          "<line x1=\"{1:.1f}\" y1=\"{2:.1f}\" x2=\"{3:.1f}\" y2=\"{4:.1f}\"/>"
          "<line x1=\"{1:.1f}\" y1=\"{4:.1f}\" x2=\"{3:.1f}\" y2=\"{2:.1f}\"/></g>\n",
          kRed, x - 6, y - 6, x + 6, y + 6);
      if (!s.cross_label.empty()) {
        double tw = text_width(s.cross_label, 12);
        bool flip = x + 10 + tw > left + pw;
        double ty = std::max(top + 12, y - 10);
        o += fmt::format(
            "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"{}\" font-size=\"12\" "
            "font-weight=\"600\" fill=\"{}\" paint-order=\"stroke\" stroke=\"#fff\" "
            "stroke-width=\"4\">{}</text>\n",
            flip ? x - 10 : x + 10, ty, flip ? "end" : "start", kRed, esc(s.cross_label));
      }
    }
  }

  // Legend.
  o += "<g class=\"legend\">\n";
  for (const Item& it : legend) {
    o += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" "
        "stroke-width=\"3\"{}/>\n",
        it.x, it.y - 4, it.x + 24, it.y - 4, esc(it.s->color),
        it.s->dash.empty() ? "" : fmt::format(" stroke-dasharray=\"{}\"", esc(it.s->dash)));
    o += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"13\" fill=\"{}\">{}</text>\n",
                     it.x + 30, it.y, kText, esc(it.s->label));
  }
  o += "</g>\n</svg>\n";
  return o;
}

std::string render_bar_chart(const BarChart& c) {
  const int W = c.width;
  double label_w = 64;
  for (const BarRow& r : c.rows) label_w = std::max(label_w, text_width(r.label, 13) + 14);
  const double top = 30, row_h = 30, bar_h = 18, bottom = 34, right = 66;
  const int H = int(top + row_h * std::max<size_t>(1, c.rows.size()) + bottom);
  // Differences grow both ways: keep room for a value label on either side of the bars.
  const double inset = c.bars_from_reference ? 46 : 0;
  const double left = label_w + inset, pw = W - label_w - right - inset;

  // Domain: ratios from 0 (bars from 0, the reference line at 1.0); differences around the
  // reference, wide enough for the limit line.
  double lo = c.bars_from_reference ? c.reference : 0.0, hi = c.reference;
  for (const BarRow& r : c.rows) {
    if (r.value && std::isfinite(*r.value)) {
      lo = std::min(lo, *r.value);
      hi = std::max(hi, *r.value);
    }
  }
  if (c.limit) {
    lo = std::min(lo, *c.limit);
    hi = std::max(hi, *c.limit);
  }
  double span = hi - lo;
  if (span <= 0) span = 1;
  if (c.bars_from_reference) {
    lo -= span * 0.05;
    hi += span * 0.05;
  } else {
    hi = std::max(hi * 1.12, c.reference * 1.25);
  }
  std::vector<double> ticks = nice_ticks(lo, hi, 5);
  while (!ticks.empty() && ticks.front() < lo - 1e-12) ticks.erase(ticks.begin());
  while (!ticks.empty() && ticks.back() > hi + 1e-12) ticks.pop_back();
  auto sx = [&](double v) { return left + (v - lo) / (hi - lo) * pw; };

  std::string o = svg_open(c.id, W, H, c.title, c.description);
  const double axis_y = top + row_h * std::max<size_t>(1, c.rows.size());
  for (double t : ticks) {
    double x = sx(t);
    o += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\"/>\n", x,
        top - 4, x, axis_y, kGrid);
    o += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" font-size=\"11\" "
        "fill=\"{}\">{}</text>\n",
        x, axis_y + 16, kAxis, tick_label(t, ticks.size() > 1 ? ticks[1] - ticks[0] : 1));
  }
  std::string labels;  // drawn last, over the reference and limit lines
  for (size_t i = 0; i < c.rows.size(); ++i) {
    const BarRow& r = c.rows[i];
    const double yc = top + row_h * double(i) + row_h / 2;
    o += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\" font-size=\"13\" "
        "fill=\"{}\"{}>{}</text>\n",
        label_w - 10, yc + 4.5, kText, r.emphasis ? " font-weight=\"600\"" : "", esc(r.label));
    if (!r.value || !std::isfinite(*r.value)) {
      labels += fmt::format(
          "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"12\" fill=\"{}\" "
          "paint-order=\"stroke\" stroke=\"#fff\" stroke-width=\"4\"{}>{}</text>\n",
          left + 6, yc + 4, r.missing_is_error ? kRed : kAxis,
          r.missing_is_error ? " font-weight=\"600\"" : " font-style=\"italic\"",
          esc(r.missing_text.empty() ? "n/a" : r.missing_text));
      continue;
    }
    const double from = c.bars_from_reference ? c.reference : 0.0;
    double x0 = sx(std::min(from, *r.value)), x1 = sx(std::max(from, *r.value));
    double w = std::max(1.5, x1 - x0);
    o += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{}\" rx=\"3\" "
        "fill=\"{}\"{}><title>{}: {}</title></rect>\n",
        x0, yc - bar_h / 2, w, bar_h, esc(r.color), r.emphasis ? " fill-opacity=\"0.55\"" : "",
        esc(r.label), esc(r.value_text));
    const bool negative = *r.value < from;
    double tx = negative ? x0 - 6 : x0 + w + 6;
    labels += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"{}\" font-size=\"12\" fill=\"{}\" "
        "font-weight=\"600\" paint-order=\"stroke\" stroke=\"#fff\" stroke-width=\"3\">{}</text>\n",
        tx, yc + 4, negative ? "end" : "start", kText, esc(r.value_text));
  }
  // Reference and limit lines on top of the bars, under the value labels.
  double rx = sx(c.reference);
  o += fmt::format(
      "<line class=\"reference\" x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" "
      "y2=\"{2:.1f}\" stroke=\"{3}\" stroke-width=\"1.6\"{4}/>\n",
      rx, top - 8, axis_y, kText, c.bars_from_reference ? "" : " stroke-dasharray=\"5 3\"");
  // Labels above the lines; when the limit is left of the reference, each label leans away from
  // the other so that they do not overlap.
  const bool lean = c.limit && *c.limit < c.reference;
  if (!c.reference_label.empty()) {
    o += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"{}\" font-size=\"11\" "
        "fill=\"{}\">{}</text>\n",
        lean ? rx - 4 : rx, top - 12, lean ? "start" : "middle", kText, esc(c.reference_label));
  }
  if (c.limit) {
    double x = sx(*c.limit);
    o += fmt::format(
        "<line class=\"limit\" x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" "
        "y2=\"{2:.1f}\" stroke=\"{3}\" stroke-width=\"1.6\" stroke-dasharray=\"4 3\"/>\n",
        x, top - 8, axis_y, kRed);
    o += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"{}\" font-size=\"11\" "
        "fill=\"{}\">{}</text>\n",
        lean ? x + 4 : x, top - 12, lean ? "end" : "middle", kRed, esc(c.limit_label));
  }
  o += labels;
  o += "</svg>\n";
  return o;
}

}  // namespace mixp::study::detail
