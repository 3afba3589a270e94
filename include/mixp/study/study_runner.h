// The precision study (docs/architecture.md 3.9 and 4, `mixp compare`): trains the same model on
// the same data from the same initialisation once per precision recipe (and per seed when K > 1),
// collects each run's RunRecord, and writes the report (report.h).
//
//   StudyConfig c;
//   c.base.model.name = "mlp";                 // the TrainConfig every run starts from
//   c.base.epochs = 1;
//   c.precisions = {"fp32", "bf16", "fp16"};   // empty = default_study_precisions()
//   c.out_dir = "mixp-study";
//   StudyOutcome o = run_study(c, [](const StudyEvent& e) { ... progress ... });
//
// Per run: a Trainer with the run's precision and seed (model initialisation and data order come
// from the seed, so every precision of one seed starts from the same weights and sees the same
// batches), a callback that records the loss and loss-scale of every step (downsampled to at most
// max_curve_points for the report), and the energy: Linux RAPL (RaplEnergyMeter) over the
// training loop when readable, else the estimate from counted operations (step_counts.h,
// energy_model.h) labelled energy_source "estimate". The estimate is also kept for every run in
// energy_estimate_joules, so that precisions can be compared on the model even where RAPL
// measured.
//
// A run never aborts the study:
// - the Trainer's NaN guard (fp32/fp64 stop on a non-finite loss or gradient) makes the run
//   diverged = true with diverged_at_step, and the metrics of the steps it completed;
// - a run that finishes with a non-finite final loss is diverged too (at the first non-finite
//   step); skipped steps under loss scaling are not divergence;
// - any other exception (a recipe that refuses the model, ...) is the run's `error`.
// Problems common to every run are found before the first run starts and thrown: an unknown or
// unavailable precision (ConfigError listing the known ones), a bad base configuration
// (ConfigError), missing data (data::DataError), an output folder that must not be written
// (StudyError).
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "mixp/study/study_results.h"
#include "mixp/train/callbacks.h"
#include "mixp/train/train_config.h"

namespace mixp::study {

// A study that cannot be written where asked (the output folder rules below).
class StudyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct StudyConfig {
  // What every run shares: model and shape, data and limits, epochs or steps, batch, lr,
  // optimizer, threads, and the first seed. Its precision, save/resume/log fields are ignored.
  train::TrainConfig base;
  std::vector<std::string> precisions;  // in this order; empty = default_study_precisions()
  int seeds = 1;                        // K: seeds base.seed, base.seed + 1, ...
  std::filesystem::path out_dir;        // "" = do not write the report
  bool force = false;                   // write into an existing folder that is not a study
  int max_curve_points = 500;           // loss curve and loss-scale trace, per run
  std::string description;              // shown under the report's title; "" = generated
  // `mixp compare --inspect SPEC` (docs/inspect.md, "In the precision study"): each run is
  // inspected with this spec (inspect/inspect_spec.h; its out= and dump= are ignored) and
  // profiled; the run's extra fields get "inspect" (per role, module tensor and step, the
  // overflow and underflow fractions of the run's own narrow format) and "top_ops" (the
  // profiler's largest rows), which the report shows as heatmaps and tables. "" = off.
  std::string inspect;
  // The speed verdict's timing (docs/study.md, "Timing in rounds"): after the runs, the
  // precisions whose first-seed run finished are timed together in `timing_rounds` interleaved
  // rounds of `timing_steps` steps each (0 = about 40 ms of steps, within a quarter of the runs'
  // training time); results.json's "timing". 0 rounds = off: the speed-up then compares the
  // runs' median step times.
  int timing_rounds = 5;
  int64_t timing_steps = 0;
};

// Progress, for a display. Sent on the study's thread, in this order per run.
struct StudyEvent {
  enum class Kind { run_begin, step, evaluate, run_end };
  Kind kind = Kind::run_begin;
  int run_index = 0;  // 0-based, over all runs (precisions x seeds)
  int run_count = 0;
  std::string precision;
  uint64_t seed = 0;
  const train::StepInfo* step = nullptr;  // Kind::step
  const RunRecord* record = nullptr;      // Kind::run_end
};
using StudyProgress = std::function<void(const StudyEvent&)>;

struct StudyOutcome {
  StudyResults results;  // every run (one record per precision and seed), as the report shows it
  bool any_finished = false;  // at least one run neither diverged nor failed
};

// Runs the study and, when config.out_dir is set, writes results.json, results.csv, report.md
// and report.html there (write_study_report). Throws as described at the top of this file.
StudyOutcome run_study(const StudyConfig& config, const StudyProgress& progress = {});

// The precisions a study runs when none are named: fp32, tf32, bf16, fp16, bf16-pure, fp8,
// int8-qat, less those that cannot train `model` (no int8-qat for the gpt), in that order: the
// recipe registry's default list (train::recipe_names, RecipeTraits::study_order). fp64 is not
// among them:
// it is the numerical reference, and slow (90x fp32's step time for the mlp).
std::vector<std::string> default_study_precisions(std::string_view model = "mlp");

// Checks a list of precision names before anything runs. Throws train::ConfigError for an
// empty list, a name listed twice, a name that is planned but not in this build, an unknown
// name (the message lists the available precisions), or a recipe that cannot train `model`.
void check_precisions(const std::vector<std::string>& precisions,
                      std::string_view model = "mlp");

// The output folder rules: a missing folder is fine (it is created when the report is written);
// an existing folder is fine when it holds a previous study (results.json with the study's
// schema: its files are overwritten) or when `force`; anything else (a file, a folder with other
// content) throws StudyError: "refusing to write into DIR: it exists and is not a previous mixp
// study; use --force".
void check_output_dir(const std::filesystem::path& dir, bool force);
// True when `dir/results.json` is a study's results.json (model, runs, verdicts, criteria).
bool is_previous_study(const std::filesystem::path& dir);

// Keeps at most `max_points` of a curve: every i-th point, plus the last one.
std::vector<std::pair<int64_t, double>> downsample_curve(
    const std::vector<std::pair<int64_t, double>>& curve, int max_points);
// A step function (the loss scale): keeps the first and last points and every change; then, if
// still longer than max_points, downsample_curve.
std::vector<std::pair<int64_t, double>> downsample_steps(
    const std::vector<std::pair<int64_t, double>>& trace, int max_points);

}  // namespace mixp::study

namespace mixp::study {

// A plain-text table of a study's results for a terminal: one row per precision (seeds
// aggregated, "mean ± sd"), with accuracy (or validation loss), final loss, ms/step and speed-up
// against the baseline, peak memory, energy (marked "(estimate)") and the verdict; then the
// recommendation and its reason. Lines end in '\n'.
std::string format_study_table(const StudyResults& results);

// One line about one run, as a progress display prints it when the run ends, e.g.
// "bf16  seed 0: accuracy 84.12%, loss 0.4311, 12.3 ms/step, 14.2 s" or
// "fp16  seed 0: diverged at step 37 (NaN)" or "fp8  seed 0: failed: <reason>".
std::string format_run_line(const RunRecord& run);

}  // namespace mixp::study
