// Callbacks: how the Trainer reports progress without printing (docs/architecture.md 6.11), and
// where code plugs into its step: gradient synchronisation, gradient inspection or surgery. The CLI
// supplies a progress bar; the library supplies the JSON Lines log. Callbacks run on the training
// thread, in the order they were added; an exception from one stops the run and propagates out of
// fit() (no checkpoint is written then).
//
// The stages, in order (every method does nothing unless overridden):
//
//   on_train_begin(first_step, total_steps)            fit(), before the first step
//   for each optimizer step:
//     for each of the step's micro-batches:
//       forward, loss, backward of the (scaled) loss
//       on_backward_end(ctx)                           gradients of micro-batches 0..k summed
//     on_gradients_ready(ctx)                          all of the step's gradients, before the
//                                                      recipe unscales, checks and clips them
//     unscale + inf/NaN check, clip, learning rate, optimizer step, loss-scale update
//     on_step_end(info)                                fit() only, with what the step did
//     (checkpoint every save_every steps)
//   on_evaluate_begin()                                fit(), when evaluation starts
//   on_train_end()                                     fit(), after evaluation
//
// Trainer::train_steps() runs the two gradient stages too (they are part of the step), but not
// the reporting ones.
#pragma once
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <span>
#include <string>

#include "mixp/io/line_file.h"
#include "mixp/tensor/tensor.h"

namespace mixp::nn {
class Module;
}
namespace mixp::optim {
class Optimizer;
}

namespace mixp::train {

class PrecisionRecipe;

// The step in progress, for on_backward_end and on_gradients_ready. The references are valid for
// the duration of the call.
//
// The gradients (parameters[i].grad()) are still multiplied by loss_scale (fp16 recipes with loss
// scaling; 1 otherwise) and hold the sum of the step's micro-batches so far, each micro-batch's
// loss divided by micro_batches. This is where a data-parallel run all-reduces them (as PyTorch's
// DDP does, before GradScaler.unscale_): change them in place (Tensor::mul_, add_, copy_) and the
// recipe's inf/NaN check, the clipping and the optimizer step see the result. A parameter that no
// micro-batch reached has no gradient (grad() undefined).
struct StepContext {
  int64_t step = 0;           // the optimizer step being computed (1-based)
  int64_t total_steps = 0;    // the run's target
  int64_t epoch = 0;          // epoch of the step's micro-batches, from 0
  int64_t micro_batch = 0;    // on_backward_end: this micro-batch (0-based); else micro_batches-1
  int64_t micro_batches = 1;  // micro-batches in this step (grad_accum, fewer at an epoch's end)
  double loss = 0;            // on_backward_end: this micro-batch's loss; else the step's mean
  double loss_scale = 1.0;    // what the losses were multiplied by before backward
  nn::Module& model;
  std::span<const Tensor> parameters;  // the model's parameters, as the optimizer holds them
  PrecisionRecipe& recipe;
  optim::Optimizer& optimizer;
};

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
  // After the backward pass of each micro-batch.
  virtual void on_backward_end(StepContext& /*ctx*/) {}
  // After the last micro-batch's backward pass, before the recipe unscales and checks the
  // gradients, they are clipped and the optimizer steps: gradient synchronisation and inspection.
  virtual void on_gradients_ready(StepContext& /*ctx*/) {}
  // After the optimizer step (fit() only).
  virtual void on_step_end(const StepInfo& /*info*/) {}
  // When evaluation starts (can take a while on a large test set).
  virtual void on_evaluate_begin() {}
  virtual void on_train_end() {}
  // True when on_backward_end or on_gradients_ready reads the parameters' gradients: such a
  // callback cannot run with TrainConfig::optimizer_in_backward, which frees each gradient inside
  // backward (Trainer::add_callback refuses it).
  virtual bool reads_gradients() const { return false; }
};

// Any function of StepInfo as a callback (e.g. a progress bar).
class StepFunctionCallback final : public TrainCallback {
 public:
  explicit StepFunctionCallback(std::function<void(const StepInfo&)> fn) : fn_(std::move(fn)) {}
  void on_step_end(const StepInfo& info) override { fn_(info); }

 private:
  std::function<void(const StepInfo&)> fn_;
};

// Any function of StepContext as an on_gradients_ready stage (e.g. a gradient all-reduce, or
// logging gradient norms per layer).
class GradientFunctionCallback final : public TrainCallback {
 public:
  explicit GradientFunctionCallback(std::function<void(StepContext&)> fn) : fn_(std::move(fn)) {}
  void on_gradients_ready(StepContext& ctx) override { fn_(ctx); }
  bool reads_gradients() const override { return true; }

 private:
  std::function<void(StepContext&)> fn_;
};

// Writes one JSON object per optimizer step to `path`:
//   {"step":1,"epoch":0,"loss":2.30,"loss_scale":1.0,"skipped":false,"skipped_steps":0,
//    "grad_norm":1.7,"lr":0.001,"ms":12.5,"samples":128,"elapsed_s":0.01}
// (grad_norm is null on a skipped step: the gradients had an inf/NaN)
// (plus "tokens" for gpt). The file is the user's own log, not an output that must appear whole,
// so it is written directly rather than atomically: a crashed run leaves the lines of the steps
// it completed, each flushed as it is written. The file is created fresh (truncated) when the
// callback is made; `append` keeps existing lines instead (a resumed run continuing its log).
// Throws IoError when the file cannot be opened or written (io/line_file.h: a failed write is cut
// back to the last complete line, and the error says why).
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
  LineFile file_;
};

}  // namespace mixp::train
