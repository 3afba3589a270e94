// Judging each run against the baseline (fp32) and the criteria, and the recommendation: the
// fastest precision that keeps accuracy within the criterion and never produced a NaN.
//
// Definitions (relative to the baseline run, same model, same machine):
//   speed-up        baseline ms/step / run ms/step, per timing round (StudyResults::timing):
//                   the median of the rounds' ratios; pass when every round's ratio exceeds
//                   min_speedup, fail when none does, inconclusive when the target lies within
//                   the rounds' range (timing noise). Without rounds, the runs' ms_per_step
//                   ratio, a range of one value                                pass: > min_speedup
//   memory saving   1 - run peak / baseline peak (peak_memory_bytes; peak_rss_bytes when the
//                   tracked peak is missing in either run)                     pass: >
//                   min_memory_saving
//   accuracy loss   (baseline test_accuracy - run test_accuracy) * 100, in points (a gain is a
//                   negative loss and passes); without accuracies the relative increase of
//                   val_loss, else of final_loss                               pass: < the maximum
//   no NaN          the run did not diverge                                    pass: not diverged
//   energy ratio    run energy / baseline energy, only when both have the same energy_source
// The baseline itself passes accuracy and no-NaN trivially and has speed-up 1 and saving 0 (so
// it fails those two targets by definition: they describe what a lower precision must buy).
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mixp/study/study_results.h"

namespace mixp::study {

enum class CheckResult : uint8_t { pass, fail, not_applicable, inconclusive };
const char* to_string(CheckResult c);  // "pass", "fail", "n/a", "inconclusive"

// Which number the accuracy criterion was judged on.
enum class QualityMetric : uint8_t { test_accuracy, val_loss, final_loss, none };
const char* to_string(QualityMetric m);

struct Verdict {
  std::string precision;
  bool is_baseline = false;
  bool diverged = false;
  std::optional<int64_t> diverged_at_step;

  std::optional<double> speedup;        // baseline ms/step / run ms/step (median over rounds)
  std::optional<double> speedup_min;    // the range of the rounds' ratios (= speedup without
  std::optional<double> speedup_max;    // timing rounds)
  int speed_rounds = 0;                 // timing rounds behind the speed-up (0: the runs' medians)
  std::optional<double> step_ms_median;  // this precision's rounds: median ms per step
  std::optional<double> step_ms_min;     // and the fastest and slowest round
  std::optional<double> step_ms_max;
  std::string speed_reason;  // why the speed check came out as it did, for the report
  std::optional<double> time_ratio;     // run ms/step / baseline ms/step
  std::optional<double> memory_ratio;   // run peak / baseline peak
  std::optional<double> memory_saving;  // 1 - memory_ratio
  bool memory_from_rss = false;         // peak_rss_bytes used instead of tracked memory
  std::optional<double> energy_ratio;   // same energy_source only
  QualityMetric quality = QualityMetric::none;
  std::optional<double> accuracy_delta_points;  // run - baseline, points (negative = worse)
  std::optional<double> loss_increase;          // run / baseline - 1 (val_loss or final_loss)

  CheckResult speedup_check = CheckResult::not_applicable;
  CheckResult memory_check = CheckResult::not_applicable;
  CheckResult accuracy_check = CheckResult::not_applicable;
  CheckResult finite_check = CheckResult::not_applicable;

  // All four checks pass.
  bool passes_all() const;
  // Accuracy passes and no NaN: eligible for the recommendation.
  bool acceptable() const;
};

// The speed check on timings: baseline_ms[i] and run_ms[i] are round i's ms per step of the
// baseline and the run (equal lengths, at least one round). ratio_i = baseline_ms[i] / run_ms[i];
// speedup = their median, [min, max] their range; check: pass when min > min_speedup, fail when
// max <= min_speedup, else inconclusive; reason says which in words, starting with the check's
// name ("inconclusive: the 2.0x target lies within the measured range, ..."). Throws
// std::invalid_argument for empty or unequal spans or a non-positive time.
struct SpeedJudgement {
  double speedup = 0, min = 0, max = 0;
  CheckResult check = CheckResult::not_applicable;
  std::string reason;
};
SpeedJudgement judge_speedup(std::span<const double> baseline_ms, std::span<const double> run_ms,
                             double min_speedup);

// Median of `v` (the mean of the middle two for an even count); NaN when empty.
double median_of(std::vector<double> v);

struct Recommendation {
  std::string precision;  // "" only when the study has no run that finished
  std::string reason;     // one or two sentences
};

// The baseline run (first run whose precision is the baseline), or nullptr.
const RunRecord* find_baseline(const StudyResults& s);

// One verdict per run, in the order of s.runs.
std::vector<Verdict> compute_verdicts(const StudyResults& s);

// The fastest (lowest ms/step: the median of its timing rounds when it was timed in them, else
// the run's) acceptable run; ties keep the earlier run. Without a baseline,
// accuracy cannot be judged: the fastest run that did not diverge, and the reason says so. When
// nothing finished, precision is "" and the reason says that every run diverged or failed.
Recommendation recommend(const StudyResults& s, std::span<const Verdict> verdicts);

// The headline, e.g. "bf16 was 1.8x faster than fp32 with 0.1 points less accuracy and 42% less
// memory." about the recommended precision (or, when that is the baseline, the fastest other
// run that finished). True in every outcome: "Every run diverged: bf16 diverged at step 4 and fp32
// diverged at step 3.", "bf16 finished, but the fp32 baseline diverged at step 3, so nothing could
// be compared.", "fp32 finished; no other precision was run, ...". "" without runs, or without a
// baseline run while some run finished.
std::string summary_sentence(const StudyResults& s, std::span<const Verdict> verdicts,
                             const Recommendation& rec);

}  // namespace mixp::study
