// report.html: one self-contained page (inline CSS and SVG; no scripts, fonts, images or links
// to fetch). Sections: title, headline and recommendation, one tile per run, the verdict table,
// loss curves, cost and accuracy relative to the baseline, loss-scale trace, what the inspector
// saw (with `mixp compare --inspect`), all results, notes.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "study/report_detail.h"
#include "study/report_style.h"
#include "study/svg_charts.h"
#include "study/text_format.h"

namespace mixp::study::detail {
namespace {

struct Page {
  const PreparedStudy& p;
  std::vector<SeriesStyle> styles;
  bool lm = false;  // judged on losses (no accuracies)
};

std::string e(std::string_view s) {
  return html_escape(s);
}

std::string accent(const SeriesStyle& st) {
  return fmt::format("--accent: {0}; --accent-ink: {0};", st.color);
}

// `stacked`: "(estimate)" on its own line (narrow table cells).
std::string energy_html(const RunRecord& r, bool stacked = false) {
  if (!r.energy_joules || !std::isfinite(*r.energy_joules)) return "<span class=\"na\">n/a</span>";
  std::string t = e(format_joules(*r.energy_joules));
  if (r.energy_is_estimate()) {
    t += stacked ? "<small class=\"estimate\">(estimate)</small>"
                 : " <span class=\"estimate\">(estimate)</span>";
  }
  return t;
}

// "diverged at step N" (with "k of n seeds" below it), "failed: ..." or "" when finished.
std::string status_html(const RunRecord& r) {
  if (r.diverged) {
    std::string t = e(r.diverged_at_step ? fmt::format("diverged at step {}", *r.diverged_at_step)
                                         : std::string("diverged"));
    if (r.num_seeds > 1) {
      t += fmt::format("<small>{} of {} seeds</small>", r.diverged_seeds, r.num_seeds);
    }
    return t;
  }
  if (r.error) return e("failed: " + *r.error);
  return "";
}

// The short form for chips and chart labels: "diverged at step N", "failed".
std::string short_status(const RunRecord& r) {
  if (r.diverged) {
    return r.diverged_at_step ? fmt::format("diverged at step {}", *r.diverged_at_step)
                              : std::string("diverged");
  }
  return r.error ? "failed" : "";
}

std::string chip(CheckResult c, const std::string& text) {
  const char* cls = c == CheckResult::pass ? "pass" : c == CheckResult::fail ? "fail" : "na";
  const char* mark = c == CheckResult::pass           ? "✓ "
                     : c == CheckResult::fail         ? "✗ "
                     : c == CheckResult::inconclusive ? "? "
                                                      : "";
  std::string sr = c == CheckResult::not_applicable ? "" : std::string(" (") + to_string(c) + ")";
  return fmt::format(
      "<span class=\"chip {}\"><span aria-hidden=\"true\">{}</span>{}"
      "<span class=\"visually-hidden\">{}</span></span>",
      cls, mark, e(text), sr);
}

std::string quality_value(const Page& pg, const RunRecord& r) {
  if (pg.lm) return r.val_loss ? format_loss(*r.val_loss) : "–";
  return r.test_accuracy ? format_accuracy(*r.test_accuracy) : "–";
}

void header(std::string& o, const Page& pg) {
  const StudyResults& s = pg.p.study;
  const std::string cpu = s.machine.cpu_model.empty() ? "this machine" : s.machine.cpu_model;
  o += "<header class=\"hero\"><div class=\"wrap\">\n<p class=\"eyebrow\">mixp precision "
       "study</p>\n";
  o += fmt::format("<h1>{} on {}</h1>\n<p class=\"meta\">", e(s.model), e(cpu));
  o += fmt::format("<span>{} threads</span>", s.machine.threads);
  if (!s.machine.gpu.empty()) o += "<span>GPU: " + e(s.machine.gpu) + "</span>";
  if (!s.description.empty()) o += "<span>" + e(s.description) + "</span>";
  o += fmt::format("<span>{} runs, baseline {}</span>", s.runs.size(), e(s.baseline_precision));
  if (!s.generated_at.empty()) o += "<span>" + e(s.generated_at) + "</span>";
  o += "</p>\n";
  if (!s.machine.cpu_features.empty()) {
    o += "<p class=\"features\" aria-label=\"CPU features\">";
    for (const auto& f : s.machine.cpu_features) o += "<span>" + e(f) + "</span>";
    o += "</p>\n";
  }
  o += "</div></header>\n";
}

void summary(std::string& o, const Page& pg) {
  const auto& rec = pg.p.recommendation;
  std::string style = "--accent: #475569; --accent-ink: #334155;";
  for (size_t i = 0; i < pg.p.study.runs.size(); ++i) {
    if (pg.p.study.runs[i].precision == rec.precision) style = accent(pg.styles[i]);
  }
  o += "<section class=\"card\" aria-labelledby=\"summary-h\">\n"
       "<h2 id=\"summary-h\" class=\"visually-hidden\">Summary</h2>\n";
  if (!pg.p.summary.empty()) o += "<p class=\"headline\">" + e(pg.p.summary) + "</p>\n";
  o += fmt::format(
      "<div class=\"rec\" style=\"{}\"><div><div class=\"rec-label\">Recommendation"
      "</div><div class=\"rec-precision\">{}</div></div><p>{}</p></div>\n",
      style, rec.precision.empty() ? "none" : e(rec.precision), e(rec.reason));
  o += "</section>\n";
}

void tiles(std::string& o, const Page& pg) {
  const auto& runs = pg.p.study.runs;
  o += "<section class=\"tiles\" aria-label=\"Runs at a glance\">\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunRecord& r = runs[i];
    const Verdict& v = pg.p.verdicts[i];
    o +=
        fmt::format("<article class=\"tile\" style=\"{}\"><h3>{}<span class=\"tag\">{}</span></h3>",
                    accent(pg.styles[i]), e(r.precision),
                    v.is_baseline                                  ? "baseline"
                    : r.precision == pg.p.recommendation.precision ? "recommended"
                                                                   : "");
    std::string st = status_html(r);
    o += st.empty() ? "<p class=\"status ok\">✓ finished</p>"
                    : "<p class=\"status diverged\">✗ " + st + "</p>";
    o += "<dl>";
    // int8-qat's accuracy is the converted int8 model's (the notes say more).
    o += fmt::format(
        "<dt>{}</dt><dd>{}{}</dd>", pg.lm ? "val loss" : "accuracy", e(quality_value(pg, r)),
        evaluated_model(r).empty() ? "" : "<small class=\"model-note\">int8 model</small>");
    o += fmt::format("<dt>speed</dt><dd>{}</dd>",
                     v.speedup
                         ? e(format_ratio(*v.speedup)) + " vs " + e(pg.p.study.baseline_precision)
                         : e(format_number(r.ms_per_step, 3) + " ms/step"));
    o += fmt::format("<dt>memory</dt><dd>{}</dd>", e(format_bytes(double(r.peak_memory_bytes))));
    o += fmt::format("<dt>energy</dt><dd>{}</dd>", energy_html(r));
    o += "</dl></article>\n";
  }
  o += "</section>\n";
}

void verdict_table(std::string& o, const Page& pg) {
  const StudyResults& s = pg.p.study;
  const Criteria& c = s.criteria;
  o += "<section class=\"card\" aria-labelledby=\"verdict-h\">\n<h2 id=\"verdict-h\">Verdict "
       "against the criteria</h2>\n";
  o += fmt::format(
      "<p class=\"lede\">Each run compared with {} on this machine. A run passes when "
      "it is more than {} faster, uses more than {} less memory, loses less than {} "
      "{} and never produces NaN.</p>\n",
      e(s.baseline_precision), e(format_ratio(c.min_speedup)),
      e(format_percent(c.min_memory_saving)),
      pg.lm ? e(format_percent(c.max_loss_increase, 1))
            : e(format_number(c.max_accuracy_loss_points, 3)),
      pg.lm ? "in validation loss" : "points of accuracy");
  o += "<div class=\"table-scroll\"><table class=\"verdicts\">\n<thead><tr><th scope=\"col\">"
       "Precision</th>";
  o += fmt::format("<th scope=\"col\">Speed-up<small>target &gt; {}</small></th>",
                   e(format_ratio(c.min_speedup)));
  o += fmt::format("<th scope=\"col\">Memory saving<small>target &gt; {}</small></th>",
                   e(format_percent(c.min_memory_saving)));
  o += pg.lm ? fmt::format("<th scope=\"col\">Loss change<small>target &lt; +{}</small></th>",
                           e(format_percent(c.max_loss_increase, 1)))
             : fmt::format(
                   "<th scope=\"col\">Accuracy change<small>target loss &lt; {} points"
                   "</small></th>",
                   e(format_number(c.max_accuracy_loss_points, 3)));
  o += "<th scope=\"col\">No NaN</th><th scope=\"col\">Energy vs baseline</th>"
       "<th scope=\"col\">Verdict</th></tr></thead>\n<tbody>\n";
  for (size_t i = 0; i < s.runs.size(); ++i) {
    const RunRecord& r = s.runs[i];
    const Verdict& v = pg.p.verdicts[i];
    o += fmt::format("<tr><th scope=\"row\"><span class=\"swatch\" style=\"{}\"></span>{}</th>",
                     accent(pg.styles[i]), e(r.precision));
    if (v.is_baseline) {
      o += "<td>" + chip(CheckResult::not_applicable, "1.0x (baseline)") + "</td><td>" +
           chip(CheckResult::not_applicable, "baseline") + "</td>";
    } else {
      o += "<td>" + chip(v.speedup_check, v.speedup ? speed_text(v) : "n/a") + "</td>";
      std::string mem = v.memory_saving ? format_percent(*v.memory_saving) : "n/a";
      if (v.memory_saving && v.memory_from_rss) mem += " (RSS)";
      o += "<td>" + chip(v.memory_check, mem) + "</td>";
    }
    std::string q = "n/a";
    if (v.accuracy_delta_points) q = format_signed(*v.accuracy_delta_points, 2) + " points";
    if (v.loss_increase) q = format_signed(*v.loss_increase * 100.0, 2) + "%";
    if (!v.accuracy_delta_points && !v.loss_increase && v.accuracy_check == CheckResult::fail) {
      q = "no result";
    }
    if (v.is_baseline && v.accuracy_check == CheckResult::pass) q = "reference";
    o += "<td>" + chip(v.accuracy_check, q) + "</td>";
    std::string st = short_status(r);
    o += "<td>" +
         (v.finite_check == CheckResult::fail ? chip(CheckResult::fail, st)
          : r.error                           ? chip(CheckResult::not_applicable, st)
                                              : chip(v.finite_check, "finite")) +
         "</td>";
    std::string en = v.energy_ratio ? format_ratio(*v.energy_ratio) : "n/a";
    o += "<td class=\"num\">" + e(en) +
         (v.energy_ratio && r.energy_is_estimate() ? "<small class=\"estimate\">(estimate)</small>"
                                                   : "") +
         "</td>";
    std::string verdict = v.is_baseline    ? "<span class=\"chip base\">baseline</span>"
                          : v.passes_all() ? chip(CheckResult::pass, "all criteria")
                          : v.acceptable() ? chip(CheckResult::not_applicable, "usable")
                                           : chip(CheckResult::fail, "not usable");
    o += "<td>" + verdict + "</td></tr>\n";
  }
  o += "</tbody></table></div>\n<p class=\"lede after\">Usable: accuracy within the limit and no "
       "NaN, but short of the speed-up or memory target. Not usable: lost too much accuracy, "
       "diverged or failed.</p>\n</section>\n";
}

// Loss curves are noisy step to step (one mini-batch each) and precisions differ by a few
// hundredths, so the chart draws a centred moving average and, below it, the second half of
// training with its own y range, where the precisions separate. The raw values are in
// results.json (loss_curve).
void loss_chart(std::string& o, const Page& pg) {
  const auto& runs = pg.p.study.runs;
  size_t longest = 0;
  int64_t last_step = 0;
  for (const RunRecord& r : runs) {
    longest = std::max(longest, r.loss_curve.size());
    if (!r.loss_curve.empty()) last_step = std::max(last_step, r.loss_curve.back().first);
  }
  const int window = smoothing_window(longest);
  LineChart c;
  c.id = "loss-curves";
  c.title = "Training loss per precision";
  c.description = "Training loss against optimizer step, one line per precision";
  c.description += window > 1 ? fmt::format(" (moving average over {} logged steps).", window)
                              : std::string(".");
  c.x_label = "optimizer step";
  c.y_label = window > 1 ? "training loss (smoothed)" : "training loss";
  bool any = false;
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunRecord& r = runs[i];
    LineSeries s;
    s.label = r.precision;
    s.color = pg.styles[i].color;
    s.dash = pg.styles[i].dash;
    std::vector<ChartPoint> raw;
    for (const auto& [step, loss] : r.loss_curve) raw.push_back({double(step), loss});
    s.points = smooth_points(raw, window);
    if (r.diverged) {
      // The cross sits at the last finite loss, at the step where the run diverged.
      std::optional<ChartPoint> last;
      for (const auto& pt : s.points) {
        if (std::isfinite(pt.y)) last = pt;
      }
      if (last) {
        if (r.diverged_at_step) last->x = double(*r.diverged_at_step);
        s.cross = last;
        s.cross_label = r.precision + " " + status_text(r);  // with the seed count
      }
      s.label += " (diverged)";
    }
    any |= !s.points.empty();
    c.series.push_back(std::move(s));
  }
  if (!any) return;
  for (const auto& s : c.series) c.description += " " + s.label + ".";

  // The second half, zoomed: only where there are enough points for it to say something.
  std::optional<LineChart> zoom;
  const int64_t half = last_step / 2;
  if (longest >= 40 && half > 0) {
    zoom = c;
    zoom->id = "loss-curves-zoom";
    zoom->title = fmt::format("Training loss from step {}, zoomed", half);
    zoom->description = fmt::format(
        "The same curves from step {} to {}, with the y axis fitted to them.", half, last_step);
    zoom->height = 280;
    bool any_zoomed = false;
    for (LineSeries& s : zoom->series) {
      std::vector<ChartPoint> kept;
      for (const ChartPoint& pt : s.points) {
        if (pt.x >= double(half)) kept.push_back(pt);
      }
      s.points = std::move(kept);
      if (s.cross && s.cross->x < double(half)) {
        s.cross.reset();  // diverged before the zoomed range: its label says so
      }
      any_zoomed |= !s.points.empty();
    }
    if (!any_zoomed) zoom.reset();
  }

  o += "<section class=\"card\" aria-labelledby=\"loss-h\">\n<h2 id=\"loss-h\">Training loss"
       "</h2>\n<p class=\"lede\">";
  o += window > 1 ? e(fmt::format("Loss against optimizer step, smoothed: each point is the mean "
                                  "of {} logged steps around it (the raw values are in "
                                  "results.json). ",
                                  window))
                  : std::string("Loss at each logged optimizer step. ");
  o += "Lines that end in a red cross diverged (the loss became NaN or infinite) at that step."
       "</p>\n";
  o += render_line_chart(c);
  if (zoom) {
    o += fmt::format(
        "<p class=\"lede after\">From step {} on, with the y axis fitted to those steps: where "
        "the precisions part.</p>\n",
        half);
    o += render_line_chart(*zoom);
  }
  o += "</section>\n";
}

void relative_charts(std::string& o, const Page& pg) {
  const StudyResults& s = pg.p.study;
  const std::string& base = s.baseline_precision;
  if (!find_baseline(s)) return;
  auto make = [&](const std::string& id, const std::string& title, const std::string& sub,
                  auto value_of) {
    BarChart c;
    c.id = id;
    c.title = title;
    c.subtitle = sub;
    c.reference = 1.0;
    c.reference_label = base + " = 1.0";
    c.description = title + " relative to " + base + " (1.0 = same as " + base + ").";
    for (size_t i = 0; i < s.runs.size(); ++i) {
      BarRow row;
      row.label = s.runs[i].precision;
      row.color = pg.styles[i].color;
      row.emphasis = pg.p.verdicts[i].is_baseline;
      std::optional<double> v = value_of(pg.p.verdicts[i]);
      if (v) {
        row.value = *v;
        row.value_text = fmt::format("{:.2f}x", *v);
      } else {
        row.missing_text = "n/a";
      }
      c.rows.push_back(std::move(row));
    }
    return c;
  };
  BarChart time = make("rel-time", "Time per step", "lower is better",
                       [](const Verdict& v) { return v.time_ratio; });
  BarChart mem = make("rel-memory", "Peak memory", "lower is better",
                      [](const Verdict& v) { return v.memory_ratio; });
  BarChart energy = make("rel-energy", "Energy", "lower is better",
                         [](const Verdict& v) { return v.energy_ratio; });
  if (pg.p.any_estimate) energy.subtitle += " · (estimate)";
  for (size_t i = 0; i < s.runs.size(); ++i) {
    if (!energy.rows[i].value) {
      energy.rows[i].missing_text =
          s.runs[i].energy_joules ? "n/a (not the baseline's energy source)" : "n/a (not measured)";
    }
  }

  // Quality: difference in points (or % of loss) around 0, with the criterion's limit.
  BarChart q;
  q.id = "rel-quality";
  q.bars_from_reference = true;
  q.reference = 0;
  q.reference_label = base;
  if (pg.lm) {
    q.title = "Validation loss change";
    q.subtitle = "% vs " + base + ", lower is better";
    q.limit = s.criteria.max_loss_increase * 100.0;
    q.limit_label = "+" + format_number(*q.limit, 3) + "% limit";
  } else {
    q.title = "Accuracy change";
    q.subtitle = "points vs " + base + ", higher is better";
    q.limit = -s.criteria.max_accuracy_loss_points;
    q.limit_label = "\u2212" + format_number(s.criteria.max_accuracy_loss_points, 3) + " limit";
  }
  q.description = q.title + " relative to " + base + "; the dashed red line is the criterion.";
  for (size_t i = 0; i < s.runs.size(); ++i) {
    const Verdict& v = pg.p.verdicts[i];
    BarRow row;
    row.label = s.runs[i].precision;
    row.color = pg.styles[i].color;
    row.emphasis = v.is_baseline;
    std::optional<double> val =
        pg.lm ? (v.loss_increase ? std::optional<double>(*v.loss_increase * 100) : std::nullopt)
              : v.accuracy_delta_points;
    if (val) {
      row.value = *val;
      row.value_text = format_signed(*val, 2) + (pg.lm ? "%" : "");
    } else if (v.diverged || s.runs[i].error) {
      row.missing_text = status_text(s.runs[i]);
      row.missing_is_error = true;
    } else {
      row.missing_text = "n/a";
    }
    q.rows.push_back(std::move(row));
  }

  o += "<section class=\"card\" aria-labelledby=\"rel-h\">\n";
  o += fmt::format(
      "<h2 id=\"rel-h\">Cost and accuracy relative to {}</h2>\n<p class=\"lede\">"
      "Bars are ratios to {} (the dashed line at 1.0); below 1.0 means cheaper. "
      "Time is the median time per optimizer step.</p>\n<div class=\"grid2\">\n",
      e(base), e(base));
  for (const BarChart* c : {&time, &mem, &energy, &q}) {
    std::string sub = e(c->subtitle);
    if (c == &energy && pg.p.any_estimate) {
      sub = "lower is better · <span class=\"estimate\">(estimate)</span>";
    }
    o += fmt::format("<figure><figcaption>{}<small>{}</small></figcaption>\n{}</figure>\n",
                     e(c->title), sub, render_bar_chart(*c));
  }
  o += "</div>\n</section>\n";
}

void loss_scale_chart(std::string& o, const Page& pg) {
  if (!pg.p.any_loss_scale) return;
  const auto& runs = pg.p.study.runs;
  LineChart c;
  c.id = "loss-scale";
  c.title = "Loss scale per step";
  c.description = "Dynamic loss scale against optimizer step, for the runs that use one.";
  c.x_label = "optimizer step";
  c.y_label = "loss scale";
  c.log2_y = true;
  c.steps = true;
  c.height = 280;
  for (size_t i = 0; i < runs.size(); ++i) {
    if (runs[i].loss_scale_trace.empty()) continue;
    LineSeries s;
    s.label = runs[i].precision + fmt::format(" ({} skipped step{})", runs[i].skipped_steps,
                                              runs[i].skipped_steps == 1 ? "" : "s");
    s.color = pg.styles[i].color;
    s.dash = pg.styles[i].dash;
    for (const auto& [step, scale] : runs[i].loss_scale_trace) {
      s.points.push_back({double(step), scale});
    }
    c.series.push_back(std::move(s));
  }
  o +=
      "<section class=\"card\" aria-labelledby=\"scale-h\">\n<h2 id=\"scale-h\">Loss scale</h2>\n"
      "<p class=\"lede\">The dynamic loss scale (powers of two). It halves when a step's gradients "
      "overflow (the step is skipped) and doubles after a run of clean steps.</p>\n";
  o += render_line_chart(c);
  o += "</section>\n";
}

// A fraction as the heatmaps show it.
std::string frac(double f) {
  if (f <= 0) return "0";
  if (f < 0.0001) return "&lt;0.01%";
  return fmt::format("{:.2f}%", 100 * f);
}

// Overflow red, underflow blue, stronger with the fraction (square root: 1% is visible), as in
// inspect.html (src/inspect/inspect_report.cpp).
std::string heat_style(double ov, double un) {
  if (ov > 0) return fmt::format("background:rgba(214,39,40,{:.3f})", 0.15 + 0.85 * std::sqrt(ov));
  if (un > 0) return fmt::format("background:rgba(31,119,180,{:.3f})", 0.1 + 0.9 * std::sqrt(un));
  return "";
}

// With `mixp compare --inspect`: per run, a heatmap (module x step) per role of the overflow and
// underflow fractions in the run's own format, and the profiler's top ops (study_runner.cpp,
// inspection_extra, writes them into the run's extra fields).
void inside_numbers(std::string& o, const Page& pg) {
  std::vector<std::pair<const RunRecord*, nlohmann::json>> runs;
  for (const RunRecord& r : pg.p.study.runs) {
    if (r.extra_json.empty()) continue;
    nlohmann::json x = nlohmann::json::parse(r.extra_json, nullptr, false);
    if (x.is_object() && x.contains("inspect")) runs.emplace_back(&r, std::move(x));
  }
  if (runs.empty()) return;
  o += "<section class=\"card\" aria-labelledby=\"inside-h\">\n<h2 id=\"inside-h\">Inside the "
       "numbers</h2>\n<p class=\"lede\">Per precision, the fraction of each module's values that "
       "the run's own format overflows (red) or flushes to zero (blue), at each inspected step "
       "(gradients at the run's loss scale; FP8 recipes: E4M3 forward, E5M2 gradients, before "
       "their per-tensor scale), and where the time went: the profiler's largest ops, casts "
       "included (docs/inspect.md).</p>\n";
  for (const auto& [run, x] : runs) {
    const auto& ins = x.at("inspect");
    o += fmt::format("<h3 class=\"inside-run\">{}</h3>\n", e(run->precision));
    // role -> rows (first-seen order) -> step -> (overflow, underflow, format)
    std::map<std::string, std::vector<std::string>> rows;
    std::map<std::pair<std::string, std::string>, std::map<int64_t, std::tuple<double, double,
                                                                              std::string>>> cell;
    std::set<int64_t> steps;
    for (const auto& c : ins.at("cells")) {
      const std::string role = c.at(0).get<std::string>(), row = c.at(1).get<std::string>();
      const int64_t step = c.at(2).get<int64_t>();
      auto& names = rows[role];
      if (std::find(names.begin(), names.end(), row) == names.end()) names.push_back(row);
      cell[{role, row}][step] = {c.at(3).get<double>(), c.at(4).get<double>(),
                                 c.at(5).get<std::string>()};
      steps.insert(step);
    }
    if (rows.empty()) {
      o += "<p class=\"lede\">No narrower format than fp32 in this run: nothing to overflow.</p>\n";
    }
    for (const auto& [role, names] : rows) {
      const std::string fmt_name = std::get<2>(cell[{role, names.front()}].begin()->second);
      o += fmt::format("<h4>{} &middot; {}</h4>\n<div class=\"table-scroll\"><table class=\"heat\">"
                       "<tr><th>module tensor</th>",
                       e(fmt_name), e(role));
      for (int64_t st : steps) o += fmt::format("<th class=\"num\">step {}</th>", st);
      o += "</tr>\n";
      for (const std::string& n : names) {
        o += fmt::format("<tr><td><code>{}</code></td>", e(n));
        const auto& by_step = cell[{role, n}];
        for (int64_t st : steps) {
          const auto it = by_step.find(st);
          if (it == by_step.end()) {
            o += "<td class=\"heat-cell empty\"></td>";
            continue;
          }
          const auto& [ov, un, f] = it->second;
          o += fmt::format("<td class=\"heat-cell num\" style=\"{}\">{} / {}</td>",
                           heat_style(ov, un), frac(ov), frac(un));
        }
        o += "</tr>\n";
      }
      o += "</table></div>\n";
    }
    if (x.contains("top_ops") && !x.at("top_ops").empty()) {
      o += "<h4>Top ops</h4>\n<div class=\"table-scroll\"><table class=\"top-ops\"><tr><th>op"
           "</th><th>dtype</th><th>phase</th><th class=\"num\">calls</th><th class=\"num\">ms"
           "</th><th class=\"num\">share</th></tr>\n";
      for (const auto& t : x.at("top_ops")) {
        o += fmt::format(
            "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td "
            "class=\"num\">{:.2f}</td><td class=\"num\">{:.1f}%</td></tr>\n",
            e(t.at("op").get<std::string>()), e(t.at("dtype").get<std::string>()),
            e(t.at("phase").get<std::string>()), t.at("calls").get<int64_t>(),
            t.at("ms").get<double>(), 100 * t.at("share").get<double>());
      }
      o += "</table></div>\n";
    }
  }
  o += "</section>\n";
}

void results_table(std::string& o, const Page& pg) {
  const auto& runs = pg.p.study.runs;
  o += "<section class=\"card\" aria-labelledby=\"results-h\">\n<h2 id=\"results-h\">All results"
       "</h2>\n<p class=\"lede\">Means over seeds where a precision ran several (± sample standard "
       "deviation). Every number is also in results.json and results.csv.</p>\n";
  o += "<div class=\"table-scroll\"><table class=\"results\">\n<thead><tr><th scope=\"col\">"
       "Precision</th><th scope=\"col\">Status</th>";
  o += pg.lm ? "<th scope=\"col\" class=\"num\">Val loss</th>"
             : "<th scope=\"col\" class=\"num\">Test accuracy</th>";
  o +=
      "<th scope=\"col\" class=\"num\">Final loss</th><th scope=\"col\" class=\"num\">ms/step</th>";
  o += pg.lm ? "<th scope=\"col\" class=\"num\">tokens/s</th>"
             : "<th scope=\"col\" class=\"num\">samples/s</th>";
  // LoRA studies (--lora): what each run trained, next to its peak memory (the gradients and
  // optimizer state are the adapters'), as report.md's table and the terminal's say.
  const bool lora = std::any_of(runs.begin(), runs.end(),
                                [](const RunRecord& r) { return !trainable_text(r).empty(); });
  o += "<th scope=\"col\" class=\"num\">Train time</th><th scope=\"col\" class=\"num\">Peak memory"
       "</th><th scope=\"col\" class=\"num\">Peak RSS</th>";
  if (lora) o += "<th scope=\"col\" class=\"num\">Trainable<small>parameters</small></th>";
  o += "<th scope=\"col\" class=\"num\">Energy</th><th scope=\"col\" class=\"num\">Steps"
       "<small>skipped</small></th></tr></thead>\n<tbody>\n";
  using Format = std::string (*)(double);
  Format acc = [](double v) { return format_accuracy(v); };
  Format loss = [](double v) { return format_loss(v); };
  Format ms = [](double v) { return format_sig(v, 3); };
  Format rate = [](double v) {
    return v >= 1000 ? format_count(std::llround(v)) : format_sig(v, 3);
  };
  Format dur = [](double v) { return format_duration(v); };
  Format bytes = [](double v) { return format_bytes(v); };
  // A number cell; the spread over seeds, when there is one, on a second line.
  auto cell = [](const RunRecord& r, const std::string& field, double v, Format f,
                 Format sf = nullptr) {
    std::string t = "<td class=\"num\">" + html_escape(f(v));
    if (auto sd = spread(r, field, v))
      t += "<small>± " + html_escape((sf ? sf : f)(*sd)) + "</small>";
    return t + "</td>";
  };
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunRecord& r = runs[i];
    std::string st = status_html(r);
    o += fmt::format("<tr><th scope=\"row\"><span class=\"swatch\" style=\"{}\"></span>{}</th>",
                     accent(pg.styles[i]), e(r.precision));
    o += st.empty() ? "<td class=\"ok nowrap\">finished</td>"
                    : "<td class=\"diverged status-cell\">" + st + "</td>";
    if (pg.lm) {
      o += r.val_loss ? cell(r, "val_loss", *r.val_loss, loss, format_spread)
                      : "<td class=\"num\">–</td>";
    } else {
      std::string a = r.test_accuracy ? cell(r, "test_accuracy", *r.test_accuracy, acc)
                                      : "<td class=\"num\">–</td>";
      if (r.test_accuracy && !evaluated_model(r).empty()) {
        a.insert(a.size() - 5, "<small>int8 model</small>");  // before "</td>"
      }
      o += a;
    }
    o += std::isfinite(r.final_loss) ? cell(r, "final_loss", r.final_loss, loss, format_spread)
                                     : "<td class=\"num\">NaN</td>";
    o += cell(r, "ms_per_step", r.ms_per_step, ms, format_spread);
    double thr = pg.lm && r.tokens_per_s ? *r.tokens_per_s : r.samples_per_s;
    o += cell(r, pg.lm && r.tokens_per_s ? "tokens_per_s" : "samples_per_s", thr, rate,
              format_spread);
    o += cell(r, "train_time_s", r.train_time_s, dur);
    o += cell(r, "peak_memory_bytes", double(r.peak_memory_bytes), bytes);
    o += cell(r, "peak_rss_bytes", double(r.peak_rss_bytes), bytes);
    if (lora) {
      const std::string t = trainable_text(r);
      o += "<td class=\"num\">" + (t.empty() ? std::string("–") : e(t)) + "</td>";
    }
    o += "<td class=\"num\">" + energy_html(r, true) + "</td>";
    o +=
        fmt::format("<td class=\"num\">{}{}<small>{}</small></td></tr>\n", e(format_count(r.steps)),
                    r.num_seeds > 1 ? fmt::format(" × {} seeds", r.num_seeds) : "",
                    e(format_count(r.skipped_steps)));
  }
  o += "</tbody></table></div>\n</section>\n";
}

void notes(std::string& o, const Page& pg) {
  const StudyResults& s = pg.p.study;
  o += "<section class=\"card notes\" aria-labelledby=\"notes-h\">\n<h2 id=\"notes-h\">Notes</h2>"
       "\n<ul>\n";
  o += "<li>" + e(kCriteriaSource) + "</li>\n";
  std::string en = e(energy_note(pg.p));
  o += "<li>" + en + "</li>\n";
  for (const std::string& n : speed_notes(pg.p)) o += "<li>" + e(n) + "</li>\n";
  for (const std::string& n : precision_notes(pg.p)) o += "<li>" + e(n) + "</li>\n";
  o += fmt::format("<li>Machine: {}, {} threads{}{}.</li>\n", e(s.machine.cpu_model),
                   s.machine.threads, s.machine.gpu.empty() ? "" : ", GPU " + e(s.machine.gpu),
                   s.machine.os.empty() ? "" : ", " + e(s.machine.os));
  o += "<li>Speed-up and time ratios use the median milliseconds per optimizer step of the "
       "timing rounds (of the runs when the study was not timed in rounds); memory uses the peak "
       "tracked tensor memory (peak RSS when that is missing).</li>\n";
  o += "</ul>\n</section>\n";
}

}  // namespace

std::string render_report_html(const PreparedStudy& p) {
  Page pg{p, {}, false};
  std::vector<std::string> names;
  for (const RunRecord& r : p.study.runs) names.push_back(r.precision);
  pg.styles = precision_styles(names);
  pg.lm = !std::any_of(p.study.runs.begin(), p.study.runs.end(), [](const RunRecord& r) {
    return r.test_accuracy.has_value();
  }) && std::any_of(p.study.runs.begin(), p.study.runs.end(), [](const RunRecord& r) {
    return r.val_loss.has_value();
  });
  const StudyResults& s = p.study;
  std::string o;
  o.reserve(64 * 1024);
  o += "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
       "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  o += fmt::format("<title>Precision study: {} on {}</title>\n", e(s.model),
                   e(s.machine.cpu_model.empty() ? "this machine" : s.machine.cpu_model));
  o += "<style>";
  o += report_css();
  o += "</style>\n</head>\n<body>\n";
  header(o, pg);
  o += "<main class=\"wrap\">\n";
  summary(o, pg);
  tiles(o, pg);
  verdict_table(o, pg);
  loss_chart(o, pg);
  relative_charts(o, pg);
  loss_scale_chart(o, pg);
  inside_numbers(o, pg);
  results_table(o, pg);
  notes(o, pg);
  o += "</main>\n<footer class=\"wrap\">Generated by mixp compare. Self-contained: no scripts and "
       "nothing loaded from the network.</footer>\n</body>\n</html>\n";
  return o;
}

}  // namespace mixp::study::detail
