// The look of report.html (internal): the inline style sheet and one colour per precision.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace mixp::study::detail {

// The page's CSS (inlined in <style>; no fonts or images are fetched).
std::string_view report_css();

// A colour and dash pattern per run, in run order. Families keep one hue (fp16, fp16-o2,
// fp16-pure are all vermillion and differ by dash) from the Okabe-Ito colour-blind-safe palette,
// darkened where needed for 3:1 contrast against white (WCAG 1.4.11 for graphics).
struct SeriesStyle {
  std::string color;
  std::string dash;
};
std::vector<SeriesStyle> precision_styles(const std::vector<std::string>& precisions);

}  // namespace mixp::study::detail
