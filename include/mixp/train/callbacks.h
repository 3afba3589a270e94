// Callbacks: how the Trainer reports progress without printing (docs/architecture.md 6.11). The CLI
// supplies a progress bar; the library supplies the JSON Lines log. Callbacks run on the training
// thread between optimizer steps; an exception from one stops the run and propagates out of fit().
#pragma once
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>

namespace mixp::train {

// One optimizer step, as the log records it.
struct StepInfo {
  int64_t step = 0;           // optimizer steps done, this one included (1-based)
  int64_t total_steps = 0;    // the run's target
  int64_t epoch = 0;          // epoch of this step's last micro-batch, from 0
  double loss = 0;            // mean loss over the step's micro-batches (unscaled)
  double loss_scale = 1.0;    // the scale this step's losses were multiplied by (1: no scaling)
  bool skipped = false;       // the recipe skipped this step (inf/NaN gradients under loss scaling)
  int64_t skipped_steps = 0;  // steps skipped so far in the run, this one included
  double grad_norm = 0;  // global L2 norm of the unscaled gradients before clipping (NaN: skipped)
  double lr = 0;         // learning rate used by this step
  double ms = 0;         // wall time of the step
  double cpu_ms = 0;     // process CPU time of the step (all threads)
  int64_t samples = 0;   // samples (gpt: sequences) in this step
  int64_t tokens = 0;    // gpt: samples * context; 0 for classifiers
  double elapsed_s = 0;  // since the start of this run's training loop
};

// Summary after the loop and evaluation.
struct RunSummary {
  int64_t steps = 0;
  double final_loss = 0;
};

class TrainCallback {
 public:
  virtual ~TrainCallback() = default;
  // Before the first step of this run (first_step > 1 when resuming).
  virtual void on_train_begin(int64_t /*first_step*/, int64_t /*total_steps*/) {}
  virtual void on_step_end(const StepInfo& /*info*/) {}
  // When evaluation starts (can take a while on a large test set).
  virtual void on_evaluate_begin() {}
  virtual void on_train_end() {}
};

// Any function of StepInfo as a callback (e.g. a progress bar).
class StepFunctionCallback final : public TrainCallback {
 public:
  explicit StepFunctionCallback(std::function<void(const StepInfo&)> fn) : fn_(std::move(fn)) {}
  void on_step_end(const StepInfo& info) override { fn_(info); }

 private:
  std::function<void(const StepInfo&)> fn_;
};

// Writes one JSON object per optimizer step to `path`:
//   {"step":1,"epoch":0,"loss":2.30,"loss_scale":1.0,"skipped":false,"skipped_steps":0,
//    "grad_norm":1.7,"lr":0.001,"ms":12.5,"samples":128,"elapsed_s":0.01}
// (grad_norm is null on a skipped step: the gradients had an inf/NaN)
// (plus "tokens" for gpt). The file is the user's own log, not an output that must appear whole,
// so it is written directly rather than atomically: a crashed run leaves the lines of the steps
// it completed, each flushed as it is written. The file is created fresh (truncated) when the
// callback is made; `append` keeps existing lines instead (a resumed run continuing its log).
// Throws IoError when the file cannot be opened or written.
class JsonlLogCallback final : public TrainCallback {
 public:
  explicit JsonlLogCallback(const std::filesystem::path& path, bool append = false);
  ~JsonlLogCallback() override;
  JsonlLogCallback(const JsonlLogCallback&) = delete;
  JsonlLogCallback& operator=(const JsonlLogCallback&) = delete;
  void on_step_end(const StepInfo& info) override;
  void on_train_end() override;

  // The JSON line for `info` (without the newline).
  static std::string format(const StepInfo& info);

 private:
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

}  // namespace mixp::train
