// What every report writer needs, computed once (internal).
#pragma once
#include <string>
#include <vector>

#include "mixp/study/report.h"
#include "mixp/study/verdict.h"

namespace mixp::study::detail {

struct PreparedStudy {
  StudyResults study;                // runs aggregated per (model, precision)
  std::vector<RunRecord> seed_runs;  // the input runs when some precision had K > 1 seeds
  std::vector<Verdict> verdicts;     // one per study.runs entry
  Recommendation recommendation;
  std::string summary;          // the headline sentence ("" when nothing to compare)
  bool any_estimate = false;    // some run's energy is the model estimate
  bool any_energy = false;      // some run has an energy number
  bool any_loss_scale = false;  // some run has a loss-scale trace
};

PreparedStudy prepare_study(const StudyResults& s);

std::string render_results_json(const PreparedStudy& p);
std::string render_results_csv(const PreparedStudy& p);
std::string render_report_markdown(const PreparedStudy& p);
std::string render_report_html(const PreparedStudy& p);

// The text shown for a run's energy: "12.3 J (estimate)", "12.3 J" or "n/a".
std::string energy_text(const RunRecord& r);
// "diverged at step 120", "diverged", "failed: <error>" or "" for a finished run.
std::string status_text(const RunRecord& r);
// The sample standard deviation of `field` when the run aggregates seeds and the spread is not
// negligible (more than 1e-9 of the value; identical seeds show no "± 0").
std::optional<double> spread(const RunRecord& r, const std::string& field, double value);
// A value with its spread when there is one: "12.3 ± 0.40". `std_format` formats the spread
// (nullptr: `format`).
std::string with_std(const RunRecord& r, const std::string& field, double value,
                     std::string (*format)(double), std::string (*std_format)(double) = nullptr);
// Spread formatting for plain numbers: two significant digits.
std::string format_spread(double v);

// Where the criteria and the energy numbers come from, for the notes of every report.
extern const char* const kCriteriaSource;
// The speed-up with the range of the timing rounds' ratios: "2.1x (1.92–2.31x)"; "–" without.
std::string speed_text(const Verdict& v);
// The notes on speed: how the rounds were timed (median and range per precision) and why each
// speed check came out pass, fail or inconclusive.
std::vector<std::string> speed_notes(const PreparedStudy& p);
std::string energy_note(const PreparedStudy& p);
// What a reader needs to know about the recipes in this study that do not train the way their
// name suggests on this machine (int8-qat: fp32 training, int8 model evaluated; fp8: emulated on
// the bf16 path), one sentence group per recipe family present, and, for a one-seed study, that
// small differences can be seed noise.
std::vector<std::string> precision_notes(const PreparedStudy& p);
// The model whose test accuracy a run reports when it is not the trained one (results.json's
// `evaluated_model`, e.g. "int8 model converted after training"), or "".
std::string evaluated_model(const RunRecord& r);
// A LoRA run's trained values and all of the model's (results.json's `trainable_parameters` and
// `parameters`, train/trainer.cpp): "4.9M of 139M (3.5%)"; "" for a run that trains everything.
std::string trainable_text(const RunRecord& r);

}  // namespace mixp::study::detail
