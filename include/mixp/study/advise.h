// `mixp advise` (docs/inspect.md "The advisor"): which format each Linear layer of a model fits,
// a --layer-precision proposal, and its verification by short training runs against fp32 and bf16.
//
//   1. statistics: a short run in the reference precision (fp32 or bf16) with --inspect on the
//      forward tensors and output gradients of every module, or a statistics file of an earlier
//      `mixp train --inspect` run;
//   2. decision: inspect::advise_layers (mixp/inspect/advisor.h) per Linear layer;
//   3. verification: the same model, data and seed trained for `verify_steps` in fp32, bf16, and
//      each candidate (fp8 with the advised layer rules when a layer fits fp8; bf16 with fp32 rules
//      when a layer must stay fp32), every run profiled alike (mixp/inspect/profiler.h); then
//      `timing_rounds` interleaved rounds of `timing_steps` more steps of every run give the step
//      times that decide (one run after the other would compare the machine's load, not the
//      precisions);
//      Before each candidate runs, its step time is predicted from the fp32 run's GEMM share and
//      the GEMM bench's speed-up of each format, and its error from the statistics (the largest
//      relative MSE of the formats it gives the layers): what the measurement is compared with;
//   4. choice: of the candidates (plain bf16 included) whose quality is within the tolerance of
//      fp32 (classifiers: test accuracy within `max_accuracy_drop` points; gpt: validation loss
//      within `max_loss_rise` relative), the one with the smallest measured step time, where a
//      more complex candidate (bf16 < bf16 with fp32 rules < fp8 policy) must beat the simpler
//      one by more than `min_gain` to count as faster (one run each on a possibly busy machine). The cost
//      that decides is measured on this machine, so an FP8 policy that is numerically fine loses
//      to bf16 where FP8 GEMMs are emulated and slower;
//   5. the seeds' three symptoms with this model's measured facts (casts and fp32 kernels in the
//      bf16 profile, fp32 master weights and optimizer states against the peak, what fp16 would
//      overflow or flush).
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "mixp/inspect/advisor.h"
#include "mixp/train/train_config.h"

namespace mixp::study {

struct AdviseOptions {
  train::TrainConfig base;            // model, data, batch, seed, threads (precision ignored)
  std::string reference = "fp32";     // the statistics run's precision: fp32 or bf16
  int64_t stats_steps = 10;           // steps of the statistics run
  int64_t inspect_every = 5;          // inspect steps 1, 1 + every, ...
  std::string stats_file;             // use this --inspect JSON Lines file instead of a run
  int64_t verify_steps = 100;         // steps of each verification run
  double max_accuracy_drop = 0.5;     // points of test accuracy below fp32 (classifiers)
  double max_loss_rise = 0.01;        // relative validation loss above fp32 (gpt)
  double min_gain = 0.05;             // a more complex candidate must be this much faster
  int timing_rounds = 3;              // interleaved timing rounds after the runs (0: none)
  int64_t timing_steps = 0;           // steps per run and round; 0: max(10, verify_steps / 10)
  inspect::AdviceThresholds limits;
  std::function<void(const std::string&)> progress;  // one line per stage (may be empty)
};

// One verification run.
struct VerifyRun {
  std::string label;            // "fp32", "bf16", "proposal: fp8", "proposal: bf16"
  std::string precision, layer_precision;
  double ms_per_step = 0;      // what decides: the interleaved rounds' median (else fit_ms_per_step)
  double fit_ms_per_step = 0;  // the median step of the verification run itself
  std::optional<double> accuracy;  // classifiers, percent
  std::optional<double> val_loss;  // gpt (classifiers: test loss)
  double final_loss = 0;
  bool finite = true;
  // From its profile: shares of kernel time.
  double cast_share = 0, fp32_share = 0, layer_norm_share = 0, gemm_share = 0;
  double outside_share = 0;  // wall time outside the backend's kernels (FP8 quantize kernels ...)
  std::string top_fixed;     // the largest fp32 and cast rows: "matmul fp32 backward 20.1%, ..."
  // Memory at the training loop's peak of tracked tensors, bytes.
  double peak = 0, params = 0, masters = 0, states = 0, grads = 0;
  bool within_tolerance = false;  // quality within the tolerance of fp32
  double all_gemm_share = 0;      // GEMMs of any dtype, share of kernel time (the fp32 run's: G)
  // Predicted before the run: fp32's step with its GEMM share G rescaled by the GEMM bench's
  // speed-up of each Linear layer's format, weighted by the layers' weight sizes (0: fp32 itself).
  double predicted_ms = 0;
  double predicted_rel_mse = 0;  // the largest relative MSE its formats add to a layer's tensors
};

struct AdviseResult {
  std::string model, stats_source;
  std::string timing;  // how ms_per_step was measured
  // The GEMM bench at n = 512 on this machine (mixp/bench/gemm_bench.h): speed-up over fp32.
  double gemm_speedup_bf16 = 1, gemm_speedup_fp8 = 1;
  std::vector<inspect::LayerAdvice> layers;
  std::vector<VerifyRun> runs;  // fp32, bf16, then the candidates
  size_t chosen = 1;            // index into runs
  std::string why;              // the choice, with the measured numbers
  std::vector<std::string> symptoms;  // no speed-up, no memory saving, loss NaN
  bool as_fast_as_bf16 = false;       // the chosen run's ms/step <= bf16's
  const VerifyRun& proposal() const { return runs.at(chosen); }
};

// Throws train::ConfigError for a bad configuration, inspect::InspectError for a missing or
// malformed statistics file (naming it), and what training throws.
AdviseResult run_advise(const AdviseOptions& options);

std::string advise_text(const AdviseResult& r);
std::string advise_json(const AdviseResult& r);

}  // namespace mixp::study
