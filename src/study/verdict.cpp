// Verdicts against the criteria (docs/report.md, "Verdicts") and the recommendation
// (include/mixp/study/verdict.h).
#include "mixp/study/verdict.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "study/text_format.h"
#include "util/enum_names.h"

namespace mixp::study {
namespace {

using detail::format_percent;
using detail::format_ratio;
using detail::format_signed;

bool finished(const RunRecord& r) {
  return !r.diverged && !r.error;
}

std::optional<double> finite_opt(const std::optional<double>& v) {
  return v && std::isfinite(*v) ? v : std::nullopt;
}

// Rounded to 1e-9 so that a difference of exactly the threshold (0.5 points) compares the same
// however the two accuracies were rounded.
double tidy(double v) {
  return std::round(v * 1e9) / 1e9;
}

CheckResult check(bool ok) {
  return ok ? CheckResult::pass : CheckResult::fail;
}

std::string diverged_text(const Verdict& v) {
  return v.diverged_at_step ? fmt::format("diverged at step {}", *v.diverged_at_step)
                            : std::string("diverged");
}

// Why a run is not acceptable, for the recommendation's explanation.
std::string rejection(const Verdict& v, const RunRecord& r) {
  if (v.diverged) return v.precision + " " + diverged_text(v);
  if (r.error) return v.precision + " failed";
  if (v.accuracy_delta_points) {
    return fmt::format("{} was faster but lost {:.2f} points of accuracy", v.precision,
                       -*v.accuracy_delta_points);
  }
  if (v.loss_increase) {
    return fmt::format("{} was faster but raised the {} by {}", v.precision,
                       v.quality == QualityMetric::val_loss ? "validation loss" : "final loss",
                       format_percent(*v.loss_increase, 1));
  }
  return v.precision + " could not be compared";
}

// "accuracy within 0.5 points of fp32" or "validation loss within 0.5% of fp32".
std::string criterion_phrase(const StudyResults& s, std::span<const Verdict> verdicts) {
  for (const Verdict& v : verdicts) {
    if (v.quality == QualityMetric::val_loss || v.quality == QualityMetric::final_loss) {
      return fmt::format("{} within {} of {}",
                         v.quality == QualityMetric::val_loss ? "validation loss" : "final loss",
                         format_percent(s.criteria.max_loss_increase, 1), s.baseline_precision);
    }
  }
  return fmt::format("accuracy within {} points of {}",
                     detail::format_number(s.criteria.max_accuracy_loss_points, 3),
                     s.baseline_precision);
}

std::string quality_phrase(const Verdict& v, const StudyResults& s) {
  const Criteria& c = s.criteria;
  if (v.quality == QualityMetric::test_accuracy && v.accuracy_delta_points) {
    return fmt::format("accuracy within {} points of {} ({} points)",
                       detail::format_number(c.max_accuracy_loss_points, 3), s.baseline_precision,
                       format_signed(*v.accuracy_delta_points, 2));
  }
  if (v.loss_increase) {
    return fmt::format("its {} within {} of {} ({})",
                       v.quality == QualityMetric::val_loss ? "validation loss" : "final loss",
                       format_percent(c.max_loss_increase, 1), s.baseline_precision,
                       format_signed(*v.loss_increase * 100.0, 2) + "%");
  }
  return "its accuracy";
}

constexpr mixp::detail::EnumName<CheckResult> kCheckNames[] = {
    {CheckResult::pass, "pass"},
    {CheckResult::fail, "fail"},
    {CheckResult::not_applicable, "n/a"},
    {CheckResult::inconclusive, "inconclusive"}};
constexpr mixp::detail::EnumName<QualityMetric> kMetricNames[] = {
    {QualityMetric::test_accuracy, "test_accuracy"},
    {QualityMetric::val_loss, "val_loss"},
    {QualityMetric::final_loss, "final_loss"},
    {QualityMetric::none, "none"}};

std::string ratio2(double x) {
  return fmt::format("{:.2f}x", x);
}

// The speed-up of run r against the baseline: the timing rounds when both were timed, else the
// runs' median step times (a range of one value).
void judge_speed(Verdict& v, const StudyResults& s, const RunRecord& base, const RunRecord& r) {
  const StepTiming* bt = s.timing.find(base.precision);
  const StepTiming* rt = s.timing.find(r.precision);
  if (rt && !rt->round_ms.empty()) {
    v.step_ms_median = median_of(rt->round_ms);
    v.step_ms_min = *std::min_element(rt->round_ms.begin(), rt->round_ms.end());
    v.step_ms_max = *std::max_element(rt->round_ms.begin(), rt->round_ms.end());
  }
  SpeedJudgement j;
  if (bt && rt && !bt->round_ms.empty() && bt->round_ms.size() == rt->round_ms.size()) {
    j = judge_speedup(bt->round_ms, rt->round_ms, s.criteria.min_speedup);
    v.speed_rounds = int(rt->round_ms.size());
  } else if (base.ms_per_step > 0 && r.ms_per_step > 0 && std::isfinite(r.ms_per_step) &&
             std::isfinite(base.ms_per_step)) {
    const double one[] = {base.ms_per_step}, other[] = {r.ms_per_step};
    j = judge_speedup(one, other, s.criteria.min_speedup);
    j.reason = std::string(to_string(j.check)) +
               ": judged on the runs' median step times, one measurement each (not timed in "
               "rounds" +
               (s.timing.note.empty() ? std::string() : ": " + s.timing.note) + ")";
  } else {
    return;
  }
  v.speedup = j.speedup;
  v.time_ratio = 1.0 / j.speedup;
  v.speedup_min = j.min;
  v.speedup_max = j.max;
  v.speed_reason = j.reason;
  v.speedup_check = j.check;
}

// A run's step time for "fastest": the median of its timing rounds when it was timed in them
// (the same timing as its speed-up), else its run's median.
double step_ms(const StudyResults& s, std::span<const Verdict> verdicts, size_t i) {
  if (i < verdicts.size() && verdicts[i].step_ms_median) return *verdicts[i].step_ms_median;
  return s.runs[i].ms_per_step;
}

}  // namespace

double median_of(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

SpeedJudgement judge_speedup(std::span<const double> baseline_ms, std::span<const double> run_ms,
                             double min_speedup) {
  if (baseline_ms.empty() || baseline_ms.size() != run_ms.size()) {
    throw std::invalid_argument(fmt::format("judge_speedup: {} baseline and {} run timings",
                                            baseline_ms.size(), run_ms.size()));
  }
  std::vector<double> ratios;
  for (size_t i = 0; i < run_ms.size(); ++i) {
    if (!(baseline_ms[i] > 0) || !(run_ms[i] > 0)) {
      throw std::invalid_argument("judge_speedup: a step time is not positive");
    }
    ratios.push_back(baseline_ms[i] / run_ms[i]);
  }
  SpeedJudgement j;
  j.speedup = median_of(ratios);
  j.min = *std::min_element(ratios.begin(), ratios.end());
  j.max = *std::max_element(ratios.begin(), ratios.end());
  const std::string target = format_ratio(min_speedup);
  const size_t n = ratios.size();
  if (n == 1) {
    j.check = check(j.min > min_speedup);
    j.reason = fmt::format("{}: {} against the {} target, one measurement", to_string(j.check),
                           ratio2(j.speedup), target);
  } else if (j.min > min_speedup) {
    j.check = CheckResult::pass;
    j.reason = fmt::format("pass: all {} timing rounds above the {} target (speed-up {} to {})", n,
                           target, ratio2(j.min), ratio2(j.max));
  } else if (j.max <= min_speedup) {
    j.check = CheckResult::fail;
    j.reason = fmt::format(
        "fail: no timing round above the {} target (speed-up {} to {} over {} rounds)",
                           target, ratio2(j.min), ratio2(j.max), n);
  } else {
    j.check = CheckResult::inconclusive;
    j.reason = fmt::format(
        "inconclusive: the {} target lies within the measured range, speed-up {} to {} over {} "
        "rounds, so timing noise decides",
        target, ratio2(j.min), ratio2(j.max), n);
  }
  return j;
}

const StepTiming* TimingRounds::find(const std::string& precision) const {
  for (const StepTiming& t : precisions) {
    if (t.precision == precision) return &t;
  }
  return nullptr;
}

const char* to_string(CheckResult c) {
  return mixp::detail::name_of(kCheckNames, c);
}

const char* to_string(QualityMetric m) {
  return mixp::detail::name_of(kMetricNames, m);
}

bool Verdict::passes_all() const {
  return speedup_check == CheckResult::pass && memory_check == CheckResult::pass &&
         accuracy_check == CheckResult::pass && finite_check == CheckResult::pass;
}

bool Verdict::acceptable() const {
  if (finite_check != CheckResult::pass) return false;
  return accuracy_check == CheckResult::pass ||
         (is_baseline && accuracy_check == CheckResult::not_applicable);
}

const RunRecord* find_baseline(const StudyResults& s) {
  for (const RunRecord& r : s.runs) {
    if (r.precision == s.baseline_precision) return &r;
  }
  return nullptr;
}

std::vector<Verdict> compute_verdicts(const StudyResults& s) {
  const RunRecord* base = find_baseline(s);
  const bool base_ok = base && finished(*base);
  const Criteria& c = s.criteria;
  std::vector<Verdict> out;
  out.reserve(s.runs.size());
  for (const RunRecord& r : s.runs) {
    Verdict v;
    v.precision = r.precision;
    v.is_baseline = (&r == base);
    v.diverged = r.diverged;
    v.diverged_at_step = r.diverged_at_step;
    v.finite_check = r.diverged ? CheckResult::fail
                                : (r.error ? CheckResult::not_applicable : CheckResult::pass);

    if (base) judge_speed(v, s, *base, r);
    if (base && base->peak_memory_bytes > 0 && r.peak_memory_bytes > 0) {
      v.memory_ratio = double(r.peak_memory_bytes) / double(base->peak_memory_bytes);
    } else if (base && base->peak_rss_bytes > 0 && r.peak_rss_bytes > 0) {
      v.memory_ratio = double(r.peak_rss_bytes) / double(base->peak_rss_bytes);
      v.memory_from_rss = true;
    }
    if (v.memory_ratio) v.memory_saving = 1.0 - *v.memory_ratio;
    if (base && base->energy_joules && r.energy_joules && *base->energy_joules > 0 &&
        std::isfinite(*r.energy_joules) && base->energy_source == r.energy_source) {
      v.energy_ratio = *r.energy_joules / *base->energy_joules;
    }

    // Quality: accuracy in points, else validation loss, else final loss (relative increase).
    if (base_ok && finished(r)) {
      auto ba = finite_opt(base->test_accuracy), ra = finite_opt(r.test_accuracy);
      auto bv = finite_opt(base->val_loss), rv = finite_opt(r.val_loss);
      if (ba && ra) {
        v.quality = QualityMetric::test_accuracy;
        v.accuracy_delta_points = tidy((*ra - *ba) * 100.0);
        v.accuracy_check = check(-*v.accuracy_delta_points < c.max_accuracy_loss_points);
      } else if (bv && rv && *bv > 0) {
        v.quality = QualityMetric::val_loss;
        v.loss_increase = tidy(*rv / *bv - 1.0);
        v.accuracy_check = check(*v.loss_increase < c.max_loss_increase);
      } else if (std::isfinite(base->final_loss) && std::isfinite(r.final_loss) &&
                 base->final_loss > 0) {
        v.quality = QualityMetric::final_loss;
        v.loss_increase = tidy(r.final_loss / base->final_loss - 1.0);
        v.accuracy_check = check(*v.loss_increase < c.max_loss_increase);
      }
    } else if (!finished(r)) {
      v.accuracy_check = CheckResult::fail;  // no usable result
    }

    if (v.is_baseline) {
      // The speed and memory targets describe what a lower precision must buy over the baseline.
      v.speedup_check = CheckResult::not_applicable;
      v.speed_reason.clear();
      v.memory_check = CheckResult::not_applicable;
    } else {
      if (v.memory_saving) v.memory_check = check(tidy(*v.memory_saving) > c.min_memory_saving);
    }
    out.push_back(std::move(v));
  }
  return out;
}

Recommendation recommend(const StudyResults& s, std::span<const Verdict> verdicts) {
  Recommendation rec;
  if (s.runs.empty()) {
    rec.reason = "The study has no runs.";
    return rec;
  }
  const RunRecord* base = find_baseline(s);
  const std::string& bname = s.baseline_precision;
  auto faster = [&](size_t a, size_t b) {  // run a strictly faster than run b
    return step_ms(s, verdicts, a) > 0 && step_ms(s, verdicts, a) < step_ms(s, verdicts, b);
  };

  if (!base || !finished(*base)) {
    std::string why =
        !base ? fmt::format("no {} baseline was run", bname)
        : base->diverged
            ? fmt::format("the {} baseline {}", bname,
                          base->diverged_at_step
                              ? fmt::format("diverged at step {}", *base->diverged_at_step)
                              : std::string("diverged"))
            : fmt::format("the {} baseline failed", bname);
    std::optional<size_t> best;
    for (size_t i = 0; i < s.runs.size(); ++i) {
      if (!finished(s.runs[i])) continue;
      if (!best || faster(i, *best)) best = i;
    }
    if (!best) {
      rec.reason = fmt::format(
          "Every run diverged or failed, so there is nothing to recommend; fix the {} run first "
          "(check the learning rate and the data), then compare again.",
          bname);
      return rec;
    }
    rec.precision = s.runs[*best].precision;
    rec.reason = fmt::format(
        "Accuracy could not be compared because {}; {} is only the fastest run that finished "
        "without NaN. Rerun with a working {} baseline before relying on it.",
        why, rec.precision, bname);
    return rec;
  }

  std::optional<size_t> best;
  for (size_t i = 0; i < s.runs.size() && i < verdicts.size(); ++i) {
    if (!verdicts[i].acceptable()) continue;
    if (!best || faster(i, *best)) best = i;
  }
  if (!best) {  // cannot happen with a finished baseline, but stay defined
    rec.precision = bname;
    rec.reason = fmt::format("No run met the criteria; {} stays the choice.", bname);
    return rec;
  }
  const Verdict& chosen = verdicts[*best];
  rec.precision = chosen.precision;

  // The faster runs that were turned down, fastest first (then the failed ones).
  std::vector<size_t> rejected;
  for (size_t i = 0; i < s.runs.size() && i < verdicts.size(); ++i) {
    if (!verdicts[i].acceptable() && (faster(i, *best) || !finished(s.runs[i]))) {
      rejected.push_back(i);
    }
  }
  std::stable_sort(rejected.begin(), rejected.end(), [&](size_t a, size_t b) {
    return step_ms(s, verdicts, a) < step_ms(s, verdicts, b);
  });
  std::string turned_down;
  for (size_t k = 0; k < rejected.size() && k < 3; ++k) {
    if (k) turned_down += (k + 1 == rejected.size() || k == 2) ? " and " : ", ";
    turned_down += rejection(verdicts[rejected[k]], s.runs[rejected[k]]);
  }

  if (chosen.is_baseline) {
    rec.reason = fmt::format(
        "{} stays the choice for this {} model on this machine: no lower precision was faster "
        "while keeping {} and free of NaN.",
        bname, s.model, criterion_phrase(s, verdicts));
    if (!turned_down.empty()) rec.reason += " " + turned_down + ".";
    return rec;
  }
  std::string first = fmt::format(
      "{} is the fastest precision that kept {} and never produced NaN: "
      "{} the speed of {}",
      chosen.precision, quality_phrase(chosen, s),
      chosen.speedup ? format_ratio(*chosen.speedup) : "–", bname);
  if (chosen.memory_saving && *chosen.memory_saving > 0.005) {
    first += fmt::format(" with {} less {}memory", format_percent(*chosen.memory_saving),
                         chosen.memory_from_rss ? "resident " : "");
  }
  first += ".";
  std::string second;
  if (!turned_down.empty()) second = " " + turned_down + ".";
  if (chosen.speedup_check == CheckResult::inconclusive) {
    second += fmt::format(
        " Whether it reaches the {} speed-up target is inconclusive: the target lies within the "
        "timing rounds' range ({} to {}).",
        format_ratio(s.criteria.min_speedup), ratio2(chosen.speedup_min.value_or(0)),
        ratio2(chosen.speedup_max.value_or(0)));
  } else if (turned_down.empty() && chosen.passes_all()) {
    second = " It meets all four criteria.";
  } else if (turned_down.empty() && chosen.speedup &&
             *chosen.speedup <= s.criteria.min_speedup) {
    second = fmt::format(" It falls short of the {} speed-up target on this machine.",
                         format_ratio(s.criteria.min_speedup));
  }
  rec.reason = first + second;
  return rec;
}

namespace {
// "finished", "diverged at step 4", "failed": what happened to a run, for the headline.
std::string run_outcome(const RunRecord& r) {
  if (r.diverged) {
    return r.diverged_at_step ? fmt::format("diverged at step {}", *r.diverged_at_step)
                              : std::string("diverged");
  }
  if (r.error) return "failed";
  return "finished";
}
}  // namespace

// The headline must be true whatever happened (docs/report.md): every run diverged, the baseline
// diverged, only one run, ...
std::string summary_sentence(const StudyResults& s, std::span<const Verdict> verdicts,
                             const Recommendation& rec) {
  if (s.runs.empty() || verdicts.size() != s.runs.size()) return "";
  const bool any_finished =
      std::any_of(s.runs.begin(), s.runs.end(), [](const RunRecord& r) { return finished(r); });
  if (!any_finished) {
    if (s.runs.size() == 1) {
      const RunRecord& r = s.runs[0];
      return r.error ? fmt::format("{} failed: {}.", r.precision, *r.error)
                     : fmt::format("{} {}.", r.precision, run_outcome(r));
    }
    const bool all_diverged =
        std::all_of(s.runs.begin(), s.runs.end(), [](const RunRecord& r) { return r.diverged; });
    const bool none_diverged =
        std::none_of(s.runs.begin(), s.runs.end(), [](const RunRecord& r) { return r.diverged; });
    std::string out = all_diverged    ? "Every run diverged: "
                      : none_diverged ? "Every run failed: "
                                      : "Every run diverged or failed: ";
    const size_t shown = std::min<size_t>(s.runs.size(), 4);
    for (size_t i = 0; i < shown; ++i) {
      if (i) out += (i + 1 == shown && shown == s.runs.size()) ? " and " : ", ";
      out += s.runs[i].precision + " " + run_outcome(s.runs[i]);
    }
    if (shown < s.runs.size()) out += fmt::format(" and {} more", s.runs.size() - shown);
    return out + ".";
  }
  const RunRecord* base = find_baseline(s);
  if (!base) return "";
  const std::string& bname = s.baseline_precision;
  // The subject: the recommended run, or the fastest other run that finished, or any other run.
  std::optional<size_t> subject;
  for (size_t i = 0; i < s.runs.size(); ++i) {
    if (verdicts[i].is_baseline) continue;
    if (s.runs[i].precision == rec.precision) {
      subject = i;
      break;
    }
  }
  if (!subject) {
    for (size_t i = 0; i < s.runs.size(); ++i) {
      if (verdicts[i].is_baseline || !finished(s.runs[i])) continue;
      const double ms = step_ms(s, verdicts, i);
      if (!subject || (ms > 0 && ms < step_ms(s, verdicts, *subject))) {
        subject = i;
      }
    }
  }
  if (!subject) {
    for (size_t i = 0; i < s.runs.size(); ++i) {
      if (!verdicts[i].is_baseline) {
        subject = i;
        break;
      }
    }
  }
  if (!subject) {
    // Only the baseline ran (one run, or its seeds); something finished.
    return fmt::format("{} {}; no other precision was run, so there is nothing to compare.", bname,
                       run_outcome(*base));
  }
  const Verdict& v = verdicts[*subject];
  const RunRecord& subj = s.runs[*subject];
  const std::string base_outcome = run_outcome(*base);
  if (v.diverged) {
    return fmt::format("{} {}; {} {}{}.", v.precision, diverged_text(v), bname, base_outcome,
                       base->diverged ? " too" : "");
  }
  if (subj.error) {
    return finished(*base) ? fmt::format("{} failed: {}.", v.precision, *subj.error)
                           : fmt::format("{} failed: {}; {} {}.", v.precision, *subj.error, bname,
                                         base_outcome);
  }
  if (!finished(*base)) {
    return fmt::format("{} finished, but the {} baseline {}, so nothing could be compared.",
                       v.precision, bname, base_outcome);
  }

  std::string speed;
  if (!v.speedup) {
    speed = fmt::format("{} ran", v.precision);
  } else if (std::fabs(*v.speedup - 1.0) < 0.05) {
    speed = fmt::format("{} was about as fast as {}", v.precision, bname);
  } else if (*v.speedup > 1.0) {
    speed = fmt::format("{} was {} faster than {}", v.precision, format_ratio(*v.speedup), bname);
  } else {
    speed =
        fmt::format("{} was {} slower than {}", v.precision, format_ratio(1.0 / *v.speedup), bname);
  }
  std::string quality;
  if (v.accuracy_delta_points) {
    double d = *v.accuracy_delta_points;
    if (std::fabs(d) < 0.005) {
      quality = "the same accuracy";
    } else {
      quality = fmt::format("{:.2f} points {} accuracy", std::fabs(d), d < 0 ? "less" : "more");
    }
  } else if (v.loss_increase) {
    double d = *v.loss_increase;
    const char* what = v.quality == QualityMetric::val_loss ? "validation loss" : "final loss";
    quality = std::fabs(d) < 0.0005 ? fmt::format("the same {}", what)
                                    : fmt::format("{} {} {}", format_percent(std::fabs(d), 1),
                                                  d > 0 ? "higher" : "lower", what);
  }
  std::string memory;
  if (v.memory_saving) {
    double m = *v.memory_saving;
    memory = std::fabs(m) < 0.005 ? "the same memory"
                                  : fmt::format("{} {} memory", format_percent(std::fabs(m)),
                                                m > 0 ? "less" : "more");
  }
  std::string out = speed;
  if (!quality.empty() && !memory.empty()) {
    out += " with " + quality + " and " + memory;
  } else if (!quality.empty() || !memory.empty()) {
    out += " with " + quality + memory;
  }
  return out + ".";
}

}  // namespace mixp::study
