// Inline SVG charts for report.html (internal): a line chart (loss curves, loss-scale trace) and
// a horizontal bar chart (ratios to the baseline, accuracy difference). Real <text> elements,
// <title>/<desc> for screen readers, no scripts, no external references.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace mixp::study::detail {

struct ChartPoint {
  double x = 0, y = 0;  // a non-finite y breaks the line
};

struct LineSeries {
  std::string label;
  std::string color;  // CSS colour
  std::string dash;   // stroke-dasharray, "" = solid
  std::vector<ChartPoint> points;
  std::optional<ChartPoint> cross;  // a red cross here (where a run diverged)
  std::string cross_label;          // e.g. "fp16 diverged at step 120"
};

struct LineChart {
  std::string id;  // unique in the page (for aria-labelledby)
  std::string title;
  std::string description;
  std::string x_label, y_label;
  bool log2_y = false;  // powers-of-two axis (loss scales)
  bool steps = false;   // a step function: each value holds until the next point
  int width = 960, height = 340;
  std::vector<LineSeries> series;
};

std::string render_line_chart(const LineChart& c);

struct BarRow {
  std::string label;
  std::string color;
  std::optional<double> value;    // nullopt: no bar, `missing_text` instead
  std::string value_text;         // printed at the end of the bar
  std::string missing_text;       // "n/a", "diverged at step 120", ...
  bool missing_is_error = false;  // missing_text in red
  bool emphasis = false;          // the baseline: hatched-free but outlined
};

struct BarChart {
  std::string id;
  std::string title;
  std::string subtitle;  // "lower is better", "(estimate)" ...
  std::string description;
  // The reference line (1.0 for ratios, 0 for differences) and its label.
  double reference = 1.0;
  std::string reference_label;
  // An optional dashed limit line (the accuracy criterion) and its label.
  std::optional<double> limit;
  std::string limit_label;
  bool bars_from_reference = false;  // differences: bars grow from the reference line
  int width = 470;
  std::vector<BarRow> rows;
};

std::string render_bar_chart(const BarChart& c);

// The moving-average window for a curve of `points` logged values: about a twentieth of them
// (1, no smoothing, below 40 points).
int smoothing_window(size_t points);

// Centred moving average over `window` points (shrinking at the ends), of the finite values only;
// a non-finite point stays non-finite (so a diverged run's line still stops there).
std::vector<ChartPoint> smooth_points(const std::vector<ChartPoint>& pts, int window);

// Tick positions: about `count` "nice" values (1, 2, 5 x 10^k) covering [lo, hi].
std::vector<double> nice_ticks(double lo, double hi, int count);

}  // namespace mixp::study::detail
