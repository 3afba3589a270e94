// Judging each run against the baseline (fp32) and the criteria, and the recommendation: the
// fastest precision that keeps accuracy within the criterion and never produced a NaN.
//
// Definitions (relative to the baseline run, same model, same machine):
//   speed-up        baseline ms_per_step / run ms_per_step                     pass: > min_speedup
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

enum class CheckResult : uint8_t { pass, fail, not_applicable };
const char* to_string(CheckResult c);  // "pass", "fail", "n/a"

// Which number the accuracy criterion was judged on.
enum class QualityMetric : uint8_t { test_accuracy, val_loss, final_loss, none };
const char* to_string(QualityMetric m);

struct Verdict {
  std::string precision;
  bool is_baseline = false;
  bool diverged = false;
  std::optional<int64_t> diverged_at_step;

  std::optional<double> speedup;        // baseline ms/step / run ms/step
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

struct Recommendation {
  std::string precision;  // "" only when the study has no run that finished
  std::string reason;     // one or two sentences
};

// The baseline run (first run whose precision is the baseline), or nullptr.
const RunRecord* find_baseline(const StudyResults& s);

// One verdict per run, in the order of s.runs.
std::vector<Verdict> compute_verdicts(const StudyResults& s);

// The fastest (lowest ms/step) acceptable run; ties keep the earlier run. Without a baseline,
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
