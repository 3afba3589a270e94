// Looking inside a training run (docs/inspect.md): tensor statistics (`--inspect SPEC`), the
// NaN/Inf origin (`--detect-anomaly`) and the op profiler (`--profile`), driven from the
// Trainer's callback stages. Off (not added), none of them costs anything.
//
//   train::Trainer t(cfg);
//   train::InspectOptions o;
//   o.inspect = inspect::parse_inspect_spec("every=100,out=stats.jsonl");
//   o.profile = true;
//   auto cb = std::make_shared<train::InspectCallback>(t, o);
//   t.add_callback(cb);
//   t.fit();                     // throws inspect::AnomalyError on the first NaN/inf when asked
//   std::cout << cb->summary();
//
// Stages: on_train_begin starts step 1's forward; on_gradients_ready records the weight
// gradients (still at the loss scale) and marks what follows as the optimizer phase; on_step_end
// records weights and optimizer states and starts the next step's forward. The profiler stops at
// on_evaluate_begin (the table covers the training steps). Add this callback before one that
// all-reduces gradients, so that the all-reduce's kernels count as communication when that
// callback sets KernelPhase::communication (mixp/backend/kernel_observer.h).
//
// The callback wraps the model's modules while it lives (ModuleTracker); destroy it before the
// Trainer's model (the Trainer owns its callbacks, so adding it is enough).
#pragma once
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "mixp/inspect/anomaly.h"
#include "mixp/inspect/inspect_spec.h"
#include "mixp/inspect/profiler.h"
#include "mixp/inspect/tensor_inspector.h"
#include "mixp/train/callbacks.h"

namespace mixp::train {

class Trainer;

struct InspectOptions {
  std::optional<inspect::InspectSpec> inspect;  // --inspect SPEC
  bool detect_anomaly = false;                  // --detect-anomaly
  bool profile = false;                         // --profile
  std::filesystem::path profile_trace;          // --profile-trace PATH (implies profile)
};

class InspectCallback final : public TrainCallback {
 public:
  // Throws inspect::InspectError for an output it cannot write (the --inspect file or dump
  // folder, the --profile-trace folder).
  InspectCallback(Trainer& trainer, InspectOptions options);
  ~InspectCallback() override;

  void on_train_begin(int64_t first_step, int64_t total_steps) override;
  void on_gradients_ready(StepContext& ctx) override;
  void on_step_end(const StepInfo& info) override;
  void on_evaluate_begin() override;
  void on_train_end() override;
  // --inspect records the gradients' statistics (on_gradients_ready).
  bool reads_gradients() const override { return inspector_ != nullptr; }

  // The statistics summary and the profiler table (what `mixp train` prints), "" when neither
  // was asked for. With the profile comes a memory breakdown of the training loop's peak:
  // parameters, fp32 master copies, optimizer states and gradients against the peak of tracked
  // tensors (what "no memory saving" is made of; docs/inspect.md).
  std::string summary() const;
  inspect::TensorInspector* inspector() { return inspector_.get(); }
  inspect::Profiler* profiler() { return profiler_.get(); }

 private:
  void begin_step(int64_t step);
  void stop_profiler();

  Trainer& trainer_;
  InspectOptions o_;
  std::unique_ptr<inspect::TensorInspector> inspector_;
  std::unique_ptr<inspect::ModuleTracker> tracker_;  // for the anomaly detector without --inspect
  std::unique_ptr<inspect::AnomalyDetector> anomaly_;
  std::unique_ptr<inspect::Profiler> profiler_;
  double t0_ms_ = 0, wall_ms_ = 0;
  // The optimizer stage (unscale, clip, fused update) as a span: from on_gradients_ready to
  // on_step_end, less the kernels it ran.
  std::chrono::steady_clock::time_point opt_start_{};
  double opt_kernel_ns_ = 0;
  std::string memory_;  // the memory breakdown, taken when the training loop ends
  bool profiling_ = false;
};

}  // namespace mixp::train
