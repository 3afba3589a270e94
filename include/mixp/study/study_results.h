// What a precision study produced, as handed to the verdict logic and the report writers: the
// machine, the model, one RunRecord per run and the success criteria it is judged against.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "mixp/study/run_record.h"

namespace mixp::study {

struct MachineInfo {
  std::string cpu_model;                  // brand string
  std::vector<std::string> cpu_features;  // e.g. avx512f, avx512_bf16, amx_bf16
  int threads = 0;                        // threads the runs used
  std::string gpu;                        // "" when the runs used no GPU
  std::string os;                         // e.g. "Linux 6.1.0-18-amd64 x86_64"
};

// This machine: the CPU's brand string and features (format/cpu_features.h), `threads` (0 = the
// hardware concurrency) and uname(2). gpu is left empty for the caller to fill.
MachineInfo describe_this_machine(int threads = 0);

// The success criteria (docs/report.md, "Verdicts": speed-up > 2x, memory saving > 30%, accuracy
// loss < 0.5 points, no NaN). The accuracy loss is read as percentage points of
// test accuracy (fp32 91.2% vs bf16 90.8% = 0.4 points). Models without an accuracy (language
// models) are judged on the relative increase of val_loss (or, lacking that, final_loss).
struct Criteria {
  double min_speedup = 2.0;               // fp32 ms/step divided by the run's, must exceed
  double min_memory_saving = 0.30;        // 1 - run peak memory / fp32 peak memory, must exceed
  double max_accuracy_loss_points = 0.5;  // fp32 accuracy minus the run's, in points, below
  double max_loss_increase = 0.005;       // run loss / fp32 loss - 1, below (no accuracy)
};

// The step time of each precision measured in interleaved rounds (docs/study.md, "Timing in
// rounds"): in round r every timed precision runs `steps_per_round` steps, in the study's order
// rotated by r, so that a change of the machine's load during the rounds reaches every precision
// alike. The speed verdict compares per-round ratios with the target (verdict.h).
struct StepTiming {
  std::string precision;
  std::vector<double> round_ms;  // ms per step of each round, in round order
};
struct TimingRounds {
  int rounds = 0;
  int64_t steps_per_round = 0;
  std::vector<StepTiming> precisions;  // empty: not timed in rounds (note says why)
  std::string note;                    // why some or all precisions were not timed ("" = none)
  // The precision's rounds, or nullptr.
  const StepTiming* find(const std::string& precision) const;
};

struct StudyResults {
  MachineInfo machine;
  std::string model;         // "mlp", "cnn", "gpt", ...
  std::string description;   // optional: data set, steps, batch ... shown under the title
  std::string generated_at;  // optional timestamp shown in the report ("" = none)
  // One record per run. Several records of one precision (K seeds) are aggregated by the report
  // (aggregate_by_precision): mean and sample standard deviation per metric.
  std::vector<RunRecord> runs;
  std::string baseline_precision = "fp32";
  Criteria criteria;
  TimingRounds timing;  // empty: the speed verdict uses the runs' median step times
};

}  // namespace mixp::study
