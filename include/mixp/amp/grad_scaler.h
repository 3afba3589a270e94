// GradScaler: dynamic loss scaling with PyTorch's semantics (torch.cuda.amp.GradScaler,
// docs/amp-training.md "Loss scaling, explained"), for training with fp16 gradients.
//
// Why: fp16's smallest subnormal is 2^-24 (6e-8); gradients of a real network are often smaller
// and flush to zero on the way back. Multiplying the loss by S multiplies every gradient by S
// (backward is linear), which moves them into fp16's range; dividing the fp32 .grad by S before
// the optimizer step ("unscaling") restores their value. If S is too large a gradient overflows
// to inf: the step is then skipped and S is halved. bf16 has fp32's exponent range (8 bits), so
// bf16 training does not need any of this.
//
//   amp::GradScaler scaler;                      // init 2^16, growth 2, backoff 0.5, interval 2000
//   for (...) {
//     opt.zero_grad();
//     Tensor loss;
//     { amp::Autocast ac(DType::fp16); loss = cross_entropy(model(x), y); }
//     scaler.scale(loss).backward();
//     scaler.unscale_(opt);                        // optional: to clip or inspect real gradients
//     optim::clip_grad_norm(opt.parameters(), 1.0);
//     scaler.step(opt);                            // skipped when a gradient is inf/NaN
//     scaler.update();                             // once per iteration, after every optimizer
//   }
//
// The state machine, per optimizer, between two update() calls (exactly PyTorch's):
//   READY --unscale_--> UNSCALED --step--> STEPPED;  READY --step--> (unscales itself) STEPPED
//   unscale_ on UNSCALED: "unscale_() has already been called on this optimizer since the last
//   update()"; unscale_ on STEPPED: "unscale_() is being called after step()"; step on STEPPED:
//   "step() has already been called since the last update()" (std::logic_error).
// unscale_ multiplies every gradient by inv = fp32(1 / double(scale)) and records found_inf when
// any gradient element was inf/NaN before the multiplication. step(opt) runs opt.step() only when
// *that optimizer's* gradients were finite and returns whether it did. update() combines the
// found_inf of every optimizer since the last update and applies the update rule once:
//   found_inf: scale = fp32(scale * backoff_factor), tracker = 0
//   else:      tracker += 1; when tracker == growth_interval: the scale becomes
//              fp32(scale * growth_factor) if that is finite (else it stays), tracker = 0.
//              (mixp tests tracker >= growth_interval, so that an interval lowered below the
//              current tracker grows at the next clean step; PyTorch's == would never grow.)
// The scale is an fp32 value, as PyTorch's scale tensor.
//
// Beyond PyTorch (all off by default, so the defaults are PyTorch's):
//   min_scale       backoff never takes the scale below this (DeepSpeed and jmp use 1)
//   max_scale       growth never takes the scale above this (Apex caps at 2^24)
//   collapse_after  after this many consecutive skipped steps with the scale already at
//                   min_scale, update() throws LossScaleCollapsed: no scale can make the
//                   gradients finite, so the run diverged or something overflows in the forward.
//   skipped_steps() how many updates saw inf/NaN (steps skipped), for logs.
// Learning-rate schedules should advance only on steps that were taken: step() returns false on a
// skipped step (PyTorch users get "Detected call of lr_scheduler.step() before optimizer.step()").
//
// fp16 gradients. unscale_ refuses (std::invalid_argument) a parameter whose .grad is fp16 —
// PyTorch's "Attempting to unscale FP16 gradients": dividing in fp16 would flush the small
// gradients that scaling rescued — and an fp16 parameter that the optimizer updates in place with
// no fp32 master copy (small updates vanish on the fp16 grid). The message names the
// alternatives. In mixp the .grad of an fp16 leaf is fp32 (autograd/node.h), so a recipe that
// knowingly trains pure fp16 (fp16-pure, Apex O3) passes allow_fp16_params.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "mixp/tensor/tensor.h"

namespace mixp::optim {
class Optimizer;
}

namespace mixp::amp {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;   // > 1
  double backoff_factor = 0.5;  // in (0, 1)
  int64_t growth_interval = 2000;
  bool enabled = true;  // false: scale() returns its input, step() just steps, the rest no-ops
  // mixp additions (see the header comment); 0 = off.
  double min_scale = 0.0;
  double max_scale = 0.0;
  int64_t collapse_after = 0;
  bool allow_fp16_params = false;
};

// Thrown by update() when the loss scale has collapsed (GradScalerOptions::collapse_after).
class LossScaleCollapsed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class GradScaler {
 public:
  // Throws std::invalid_argument for factors, interval or bounds out of range.
  explicit GradScaler(const GradScalerOptions& options = {});

  // outputs * scale, in fp32 (a narrower loss is widened first so that the product cannot
  // overflow before backward). Differentiable. The input itself when disabled.
  Tensor scale(const Tensor& outputs) const;

  // Unscales the gradients of `opt`'s parameters in place and records whether any was inf/NaN.
  void unscale_(optim::Optimizer& opt);
  // Unscales if unscale_ was not called for `opt` since the last update, then runs opt.step()
  // unless its gradients had an inf/NaN. Returns true when the optimizer stepped. Throws
  // std::logic_error when none of `opt`'s parameters has a gradient (PyTorch: "No inf checks were
  // recorded for this optimizer").
  bool step(optim::Optimizer& opt);
  // Applies the update rule once for all the optimizers stepped since the last update (or sets
  // `new_scale` manually). Throws std::logic_error when no optimizer was unscaled since the last
  // update, LossScaleCollapsed as described above.
  void update();
  void update(double new_scale);

  // The scale the next scale() multiplies by (1 when disabled).
  double get_scale() const { return enabled_ ? static_cast<double>(scale_) : 1.0; }
  int64_t growth_tracker() const { return enabled_ ? tracker_ : 0; }
  bool is_enabled() const { return enabled_; }
  // Whether unscale_ found an inf/NaN in `opt`'s gradients since the last update (false when
  // `opt` was not unscaled).
  bool found_inf(const optim::Optimizer& opt) const;
  // Whether update() will back off: some optimizer since the last update had inf/NaN gradients.
  bool found_inf_any() const;

  double growth_factor() const { return opt_.growth_factor; }
  double backoff_factor() const { return opt_.backoff_factor; }
  int64_t growth_interval() const { return opt_.growth_interval; }
  void set_growth_factor(double f);
  void set_backoff_factor(double f);
  void set_growth_interval(int64_t n);
  const GradScalerOptions& options() const { return opt_; }

  // Updates that backed off (iterations whose step was skipped) since construction / loading.
  int64_t skipped_steps() const { return skipped_; }
  // Consecutive skipped iterations with the scale at min_scale (collapse detection).
  int64_t skips_at_min() const { return skips_at_min_; }

  // PyTorch's five entries ("scale", "growth_factor", "backoff_factor", "growth_interval",
  // "_growth_tracker") plus mixp's "min_scale", "max_scale", "skipped_steps", "skips_at_min".
  // Empty when disabled. Exact doubles: a round trip restores the scaler bit for bit.
  using StateDict = std::vector<std::pair<std::string, double>>;
  StateDict state_dict() const;
  // No-op when disabled. Throws std::invalid_argument for an empty dict ("saved from a disabled
  // GradScaler"), a missing PyTorch entry or a value out of range; mixp's entries are optional.
  void load_state_dict(const StateDict& sd);

 private:
  enum class Stage { ready, unscaled, stepped };
  struct PerOptimizer {
    const optim::Optimizer* opt;
    Stage stage = Stage::ready;
    bool recorded = false;  // found_inf was recorded by unscale_
    bool found_inf = false;
  };
  PerOptimizer& state_of(const optim::Optimizer& opt);
  const PerOptimizer* find_state(const optim::Optimizer& opt) const;
  void check_options() const;
  template <typename T>
  void set_option(T GradScalerOptions::*field, T value);

  GradScalerOptions opt_;
  bool enabled_;
  float scale_;
  int64_t tracker_ = 0;
  int64_t skipped_ = 0;
  int64_t skips_at_min_ = 0;
  std::vector<PerOptimizer> per_opt_;
};

}  // namespace mixp::amp
