// report.md: the report without charts (those are in report.html).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "study/report_detail.h"
#include "study/text_format.h"
#include "util/enum_names.h"

namespace mixp::study::detail {
namespace {

constexpr mixp::detail::EnumName<CheckResult> kMarks[] = {
    {CheckResult::pass, "✅ pass"},
    {CheckResult::fail, "❌ fail"},
    {CheckResult::not_applicable, "–"},
    {CheckResult::inconclusive, "❔ inconclusive"}};

std::string mark(CheckResult c) {
  return mixp::detail::name_of(kMarks, c, "");
}

std::string ms(double v) {
  return format_sig(v, 3) + " ms";
}
std::string acc(double v) {
  return format_accuracy(v);
}
std::string loss(double v) {
  return format_loss(v);
}
std::string bytes(double v) {
  return format_bytes(v);
}
std::string dur(double v) {
  return format_duration(v);
}
std::string rate(double v) {
  return v >= 1000 ? format_count(std::llround(v)) : format_sig(v, 3);
}

}  // namespace

std::string render_report_markdown(const PreparedStudy& p) {
  const StudyResults& s = p.study;
  const std::string& base = s.baseline_precision;
  std::string o;
  o += fmt::format("# Precision study: {} on {}\n\n", md_escape(s.model),
                   md_escape(s.machine.cpu_model.empty() ? "this machine" : s.machine.cpu_model));
  std::string sub = fmt::format("{} threads", s.machine.threads);
  if (!s.machine.gpu.empty()) sub += " · GPU: " + s.machine.gpu;
  if (!s.description.empty()) sub += " · " + s.description;
  if (!s.generated_at.empty()) sub += " · " + s.generated_at;
  o += md_escape(sub) + "\n\n";
  if (!p.summary.empty()) o += "**" + md_escape(p.summary) + "**\n\n";

  o += "## Recommendation\n\n";
  if (!p.recommendation.precision.empty()) {
    o += fmt::format("**Use {}.** ", md_escape(p.recommendation.precision));
  }
  o += md_escape(p.recommendation.reason) + "\n\n";

  o += fmt::format("## Verdict against the criteria (relative to {})\n\n", md_escape(base));
  o += fmt::format(
      "| Precision | Speed-up (> {}) | Memory saving (> {}) | Accuracy change (loss < {} points) "
      "| No NaN | All criteria |\n|---|---|---|---|---|---|\n",
      format_ratio(s.criteria.min_speedup), format_percent(s.criteria.min_memory_saving),
      format_number(s.criteria.max_accuracy_loss_points, 3));
  for (size_t i = 0; i < s.runs.size(); ++i) {
    const Verdict& v = p.verdicts[i];
    const RunRecord& r = s.runs[i];
    std::string name = md_escape(v.precision) + (v.is_baseline ? " (baseline)" : "");
    std::string speed = speed_text(v);
    std::string mem = v.memory_saving ? format_percent(*v.memory_saving) : "–";
    std::string quality = "–";
    if (v.accuracy_delta_points) {
      quality = format_signed(*v.accuracy_delta_points, 2) + " points";
    } else if (v.loss_increase) {
      quality = format_signed(*v.loss_increase * 100, 2) + "% " + to_string(v.quality);
    } else if (v.accuracy_check == CheckResult::fail) {
      quality = "no result";
    }
    std::string speed_cell = v.is_baseline ? "baseline" : mark(v.speedup_check) + " " + speed;
    std::string mem_cell = v.is_baseline ? "baseline" : mark(v.memory_check) + " " + mem;
    std::string nan = v.finite_check == CheckResult::fail ? "❌ " + status_text(r)
                      : r.error                           ? "– " + md_escape(status_text(r))
                                                          : mark(v.finite_check);
    std::string all = v.is_baseline    ? "baseline"
                      : v.passes_all() ? "✅ all pass"
                      : v.acceptable()
                          ? (v.speedup_check == CheckResult::inconclusive &&
                                     v.memory_check != CheckResult::fail
                                 ? "usable (speed-up inconclusive)"
                                 : "usable (misses a target)")
                                       : "❌ not usable";
    o += fmt::format("| {} | {} | {} | {} {} | {} | {} |\n", name, speed_cell, mem_cell,
                     mark(v.accuracy_check), quality, nan, all);
  }

  o += "\n## Results\n\n";
  const bool lm = std::any_of(s.runs.begin(), s.runs.end(),
                              [](const RunRecord& r) { return r.val_loss.has_value(); });
  o += fmt::format(
      "| Precision | Status | {} | Final loss | ms/step | {} | Train time | Peak memory | Peak RSS "
      "| Energy | Skipped steps | Seeds |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
      lm ? "Val loss" : "Test accuracy", lm ? "tokens/s" : "samples/s");
  for (const RunRecord& r : s.runs) {
    std::string quality =
        lm ? (r.val_loss ? with_std(r, "val_loss", *r.val_loss, loss, format_spread) : "–")
           : (r.test_accuracy ? with_std(r, "test_accuracy", *r.test_accuracy, acc) : "–");
    double thr = lm && r.tokens_per_s ? *r.tokens_per_s : r.samples_per_s;
    std::string status = status_text(r);
    o += fmt::format(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", md_escape(r.precision),
        status.empty() ? "finished" : md_escape(status), quality,
        std::isfinite(r.final_loss) ? with_std(r, "final_loss", r.final_loss, loss, format_spread)
                                    : "NaN",
        with_std(r, "ms_per_step", r.ms_per_step, ms, format_spread),
        with_std(r, lm && r.tokens_per_s ? "tokens_per_s" : "samples_per_s", thr, rate,
                 format_spread),
        with_std(r, "train_time_s", r.train_time_s, dur),
        with_std(r, "peak_memory_bytes", double(r.peak_memory_bytes), bytes),
        with_std(r, "peak_rss_bytes", double(r.peak_rss_bytes), bytes), energy_text(r),
        r.skipped_steps, r.num_seeds);
  }

  // LoRA studies (--lora): what each run trained, next to the peak memory above.
  std::string lora;
  for (const RunRecord& r : s.runs) {
    const std::string t = trainable_text(r);
    if (!t.empty()) lora += fmt::format("| {} | {} |\n", md_escape(r.precision), t);
  }
  if (!lora.empty()) {
    o += "\nLoRA adapters: trainable parameters (gradients and optimizer state for these only; "
         "the base is frozen):\n\n| Precision | Trainable parameters |\n|---|---|\n" + lora;
  }

  o += "\n## Notes\n\n";
  o += "- " + std::string(kCriteriaSource) + "\n";
  for (const std::string& n : speed_notes(p)) o += "- " + md_escape(n) + "\n";
  o += "- " + energy_note(p) + "\n";
  for (const std::string& n : precision_notes(p)) o += "- " + md_escape(n) + "\n";
  o += fmt::format("- Machine: {}; {} threads; features: {}{}.\n", md_escape(s.machine.cpu_model),
                   s.machine.threads,
                   md_escape(fmt::format("{}", fmt::join(s.machine.cpu_features, ", "))),
                   s.machine.os.empty() ? "" : "; " + md_escape(s.machine.os));
  o += "- Charts (loss curves, time/memory/energy relative to " + md_escape(base) +
       ", loss-scale trace) are in report.html; every number is in results.json and results.csv.\n";
  return o;
}

}  // namespace mixp::study::detail
