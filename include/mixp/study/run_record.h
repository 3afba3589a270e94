// One training run's results, as the precision study sees them (docs/architecture.md 3.9 and 4).
//
// The scalar fields carry exactly the names of the `mixp train --json` object, so a run's JSON
// line can be read straight into a RunRecord and written back out: fields this struct does not
// know (threads, batch, epochs, parameters, ...) are kept verbatim in `extra_json` and written
// back, so nothing a Trainer reports is lost on the way into results.json.
//
// Units: test_accuracy is a fraction in [0, 1] (the Trainer's convention); the report shows it in
// percent and differences in percentage points. Times in ms and s, memory in bytes, energy in J.
// A non-finite number (a diverged loss) is written to JSON as null and read back as NaN.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mixp::study {

// Where an energy number came from. The report labels kEnergyEstimate "(estimate)" everywhere.
inline constexpr std::string_view kEnergyRapl = "rapl";          // CPU packages, powercap
inline constexpr std::string_view kEnergyNvml = "nvml";          // NVIDIA GPU board counter
inline constexpr std::string_view kEnergyEstimate = "estimate";  // energy_model.h, from counts
inline constexpr std::string_view kEnergyUnavailable = "unavailable";

// A results.json / train --json object that cannot be read: the message names the field and says
// what was expected.
class RecordError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct RunRecord {
  // --- the train --json fields -----------------------------------------------------------------
  std::string model;
  std::string precision;      // recipe name: fp32, bf16, fp16, fp8, int8-qat, ...
  int64_t steps = 0;          // optimizer steps done
  int64_t skipped_steps = 0;  // steps the loss scaler skipped (inf/NaN gradients)
  double ms_per_step = 0;
  double samples_per_s = 0;
  std::optional<double> tokens_per_s;   // language models
  std::optional<double> test_accuracy;  // classifiers; fraction in [0, 1]
  std::optional<double> val_loss;       // language models (and anything without an accuracy)
  double final_loss = 0;                // NaN when the run diverged
  int64_t peak_memory_bytes = 0;        // peak tracked tensor memory
  int64_t peak_rss_bytes = 0;           // peak resident set of the process
  double train_time_s = 0;
  std::optional<double> energy_joules;  // nullopt when not measured nor estimated
  std::string energy_source = std::string(kEnergyUnavailable);
  uint64_t seed = 0;
  bool diverged = false;  // loss or weights became NaN/inf and training stopped
  std::optional<int64_t> diverged_at_step;
  std::optional<std::string> error;  // why the run failed, when it did
  // --- curves ----------------------------------------------------------------------------------
  std::vector<std::pair<int64_t, double>> loss_curve;        // (step, training loss)
  std::vector<std::pair<int64_t, double>> loss_scale_trace;  // (step, loss scale); empty = none
  // --- aggregation over seeds (aggregate_runs) -------------------------------------------------
  int num_seeds = 1;
  int diverged_seeds = 0;                // how many of the num_seeds diverged
  std::vector<uint64_t> seeds;           // all seeds aggregated (empty for a single run)
  std::map<std::string, double> stddev;  // field name -> sample standard deviation (n - 1)
  // --- anything else the Trainer printed, as one JSON object text ("" or "{}" = nothing) --------
  std::string extra_json;

  bool has_energy() const { return energy_joules.has_value(); }
  bool energy_is_estimate() const { return energy_source == kEnergyEstimate; }
};

// Serialises to one JSON object: the train --json fields first (null for absent optionals and
// non-finite numbers), then the curves as [[step, value], ...], the aggregation fields when
// num_seeds > 1, then the extra fields. indent < 0: one line.
std::string to_json_string(const RunRecord& r, int indent = -1);

// Parses one JSON object (a train --json line or a results.json "runs" entry). Required: model,
// precision, steps. Everything else is optional and defaults as in RunRecord; "diverged" defaults
// to true when final_loss is null or non-finite. Throws RecordError naming the bad field.
RunRecord run_record_from_json(std::string_view json);

// The metric names aggregate_runs summarises (the keys of RunRecord::stddev), in report order.
std::span<const std::string_view> aggregated_metric_names();

// One RunRecord for K seeds of the same model and precision: each metric is the mean over the
// seeds that have it (accuracy, losses and energy over the seeds that did not diverge; time and
// memory over all), with the sample standard deviation in stddev (only when at least two values).
// diverged is true when any seed diverged (diverged_at_step: the earliest), diverged_seeds counts
// them; the loss curve is the mean at each step of the first seed's curve over the seeds that
// reached it; the loss-scale trace is the first seed's. A single record comes back unchanged.
// Throws RecordError for an empty list or mixed models/precisions.
RunRecord aggregate_runs(std::span<const RunRecord> seeds);

// Groups by (model, precision) in first-appearance order and aggregates each group.
std::vector<RunRecord> aggregate_by_precision(std::span<const RunRecord> runs);

// Mean and sample standard deviation (n - 1 in the denominator; 0 for n < 2) of `values`.
struct MeanStd {
  double mean = 0;
  double stddev = 0;
  int n = 0;
};
MeanStd mean_std(std::span<const double> values);

}  // namespace mixp::study
