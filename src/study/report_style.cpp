#include "study/report_style.h"

#include <map>

namespace mixp::study::detail {

std::string_view report_css() {
  return R"CSS(
:root {
  --ink: #1f2937; --muted: #4b5563; --line: #e5e7eb; --bg: #f3f4f6; --card: #ffffff;
  --pass: #065f46; --pass-bg: #d1fae5; --fail: #991b1b; --fail-bg: #fee2e2;
  --warn: #92400e; --red: #b91c1c;
}
* { box-sizing: border-box; }
body {
  margin: 0; background: var(--bg); color: var(--ink); line-height: 1.5;
  font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial,
    "Noto Sans", "Liberation Sans", "DejaVu Sans", sans-serif;
  -webkit-font-smoothing: antialiased;
}
.wrap { max-width: 1120px; margin: 0 auto; padding: 0 28px; }
.hero { background: linear-gradient(120deg, #0f172a 0%, #1e3a5f 60%, #14532d 130%); color: #fff;
  padding: 30px 0 26px; }
.eyebrow { margin: 0; font-size: 13px; letter-spacing: .09em; text-transform: uppercase;
  color: #cbd5e1; font-weight: 600; }
h1 { margin: 4px 0 8px; font-size: 30px; line-height: 1.2; font-weight: 700; }
.meta { margin: 0; font-size: 14px; color: #e2e8f0; }
.meta span + span::before { content: "·"; margin: 0 8px; color: #94a3b8; }
.features { margin: 8px 0 0; display: flex; flex-wrap: wrap; gap: 6px; }
.features span { font-size: 12px; padding: 1px 8px; border-radius: 999px;
  background: rgba(255,255,255,.12); color: #f1f5f9; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 14px;
  padding: 22px 26px; margin: 22px 0; box-shadow: 0 1px 3px rgba(15,23,42,.06); }
h2 { font-size: 19px; margin: 0 0 2px; }
h3 { font-size: 15px; margin: 0; }
.lede { margin: 0 0 14px; color: var(--muted); font-size: 14px; }
.headline { font-size: 23px; font-weight: 650; line-height: 1.35; margin: 0 0 18px; }
.rec { display: flex; gap: 22px; align-items: center; border-radius: 12px; padding: 16px 20px;
  background: #f8fafc; border: 1px solid var(--line); border-left: 7px solid var(--accent); }
.rec-label { font-size: 12px; text-transform: uppercase; letter-spacing: .08em; color: var(--muted);
  font-weight: 600; }
.rec-precision { font-size: 34px; font-weight: 750; color: var(--accent-ink); line-height: 1.1;
  white-space: nowrap; }
.rec p { margin: 0; font-size: 15.5px; }
.tiles { display: grid; grid-template-columns: repeat(auto-fit, minmax(200px, 1fr)); gap: 14px;
  margin: 22px 0; }
.tile { background: var(--card); border: 1px solid var(--line); border-top: 6px solid var(--accent);
  border-radius: 12px; padding: 12px 16px 14px; }
.tile h3 { font-size: 20px; color: var(--accent-ink); display: flex; align-items: baseline;
  justify-content: space-between; flex-wrap: wrap; gap: 0 8px; }
.tile h3 .name { white-space: nowrap; }
.tile .tag { font-size: 11px; font-weight: 600; color: var(--muted); text-transform: uppercase;
  letter-spacing: .06em; }
.tile dl { display: grid; grid-template-columns: auto 1fr; gap: 2px 10px; margin: 8px 0 0;
  font-size: 13.5px; }
.tile dt { color: var(--muted); }
.tile dd small.model-note { display: block; color: var(--muted); font-size: 12px; font-weight: 500; }
.tile dd { margin: 0; text-align: right; font-weight: 600; font-variant-numeric: tabular-nums; }
.tile .status { margin: 6px 0 0; font-size: 13px; font-weight: 600; }
.ok { color: var(--pass); }
.diverged { color: var(--red); font-weight: 700; }
.estimate { color: var(--warn); font-style: italic; font-weight: 500; white-space: nowrap; }
.table-scroll { overflow-x: auto; }
table { border-collapse: collapse; width: 100%; font-size: 14px; }
caption { text-align: left; color: var(--muted); font-size: 13px; padding-bottom: 8px; }
th, td { padding: 9px 10px; border-bottom: 1px solid var(--line); text-align: left;
  vertical-align: middle; }
thead th { font-size: 12.5px; color: var(--muted); font-weight: 650; background: #f8fafc;
  border-bottom: 2px solid var(--line); }
tbody th { font-weight: 650; white-space: nowrap; }
tbody tr:last-child th, tbody tr:last-child td { border-bottom: 0; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.heat { width: auto; font-size: 12px; }
table.heat th, table.heat td { padding: 2px 6px; border: 1px solid #d5d9de; }
td.heat-cell { min-width: 70px; }
td small, th small { display: block; color: var(--muted); font-size: 12px; font-weight: 500; }
table.results { font-size: 13.5px; }
table.results th, table.results td { padding: 8px 7px; }
.nowrap { white-space: nowrap; }
td.status-cell { min-width: 160px; max-width: 260px; }
.tile .status small, td.status-cell small { display: block; font-weight: 500; }
.lede.after { margin: 12px 0 0; font-size: 13px; }
.swatch { display: inline-block; width: 11px; height: 11px; border-radius: 3px;
  margin-right: 8px; background: var(--accent); vertical-align: -1px; }
.chip { display: inline-block; padding: 2px 10px; border-radius: 999px; font-weight: 650;
  font-size: 13px; white-space: nowrap; font-variant-numeric: tabular-nums; }
.chip.pass { background: var(--pass-bg); color: var(--pass); }
.chip.fail { background: var(--fail-bg); color: var(--fail); }
.chip.na { background: #f1f5f9; color: var(--muted); }
.chip.base { background: #e0e7ff; color: #3730a3; }
.grid2 { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 18px 34px; }
.grid2 figure { margin: 0; }
figure figcaption { font-weight: 650; font-size: 15px; margin: 0 0 2px; }
figure figcaption small { font-weight: 500; color: var(--muted); margin-left: 6px; }
svg.chart { display: block; width: 100%; height: auto; overflow: visible; }
svg.chart text { font-family: inherit; }
.notes ul { margin: 6px 0 0; padding-left: 20px; color: var(--muted); font-size: 14px; }
.notes li { margin: 4px 0; }
footer { color: var(--muted); font-size: 13px; padding: 4px 0 36px; }
.visually-hidden { position: absolute; width: 1px; height: 1px; overflow: hidden;
  clip: rect(0 0 0 0); clip-path: inset(50%); white-space: nowrap; }
@media (max-width: 780px) { .grid2 { grid-template-columns: 1fr; } .rec { flex-direction: column;
  align-items: flex-start; } }
)CSS";
}

std::vector<SeriesStyle> precision_styles(const std::vector<std::string>& precisions) {
  // Family -> colour (Okabe-Ito hues, darkened for contrast on white).
  auto family_color = [](const std::string& p) -> std::string {
    auto starts = [&](const char* pre) { return p.rfind(pre, 0) == 0; };
    if (starts("fp32")) return "#475569";                    // slate (the baseline)
    if (starts("fp64")) return "#111827";                    // near black
    if (starts("tf32")) return "#0072b2";                    // blue
    if (starts("bf16")) return "#007a5e";                    // bluish green
    if (starts("fp16")) return "#c2410c";                    // vermillion
    if (starts("fp8") || starts("mxfp8")) return "#7b3294";  // purple
    if (starts("int8")) return "#a16207";                    // dark yellow
    if (starts("int4") || starts("nf4")) return "#8c510a";   // brown
    if (starts("auto")) return "#0e7490";                    // teal
    return "";
  };
  static const char* const kSpare[] = {"#be185d", "#4d7c0f", "#1d4ed8", "#9a3412", "#6d28d9"};
  static const char* const kDashes[] = {"", "7 4", "2 4", "10 3 2 3"};
  std::vector<SeriesStyle> out;
  std::map<std::string, int> uses;
  int spare = 0;
  for (const std::string& p : precisions) {
    std::string c = family_color(p);
    if (c.empty()) c = kSpare[spare++ % 5];
    int n = uses[c]++;
    out.push_back({c, kDashes[n % 4]});
  }
  return out;
}

}  // namespace mixp::study::detail
