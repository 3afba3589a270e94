#include "mixp/amp/grad_scaler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "mixp/autograd/grad_mode.h"
#include "mixp/backend/backend.h"
#include "mixp/ops/ops.h"
#include "mixp/optim/optimizer.h"
#include "mixp/optim/step_reductions.h"
#include "mixp/tensor/factories.h"

namespace mixp::amp {

namespace {

// grad *= inv in place by the gradient's backend (unscale_check); sets found_inf when an element
// was inf/NaN before the multiply.
void unscale_tensor(const Tensor& grad, float inv, Tensor& found_inf) {
  Tensor g = grad.is_contiguous() ? grad : grad.contiguous();
  backend_for(g, found_inf).unscale_check(g, found_inf, inv);
  if (!g.is_same(grad)) {
    Tensor dst = grad;
    dst.copy_(g);
  } else {
    grad.bump_version();  // unscaled in place by the kernel
  }
}

std::string fp16_alternatives() {
  return "unscaling in fp16 flushes the small gradients that loss scaling rescued, and updating "
         "fp16 weights directly loses small updates. Keep fp32 parameters and run the model under "
         "amp::Autocast(DType::fp16) (recipe fp16, Apex O1), or give the optimizer fp32 master "
         "weights (PrecisionOptions::master_weights = true; recipe fp16-o2), or train in bf16, "
         "which has fp32's range and needs no loss scaling (recipes bf16, bf16-pure). To unscale "
         "anyway (pure fp16, Apex O3), set GradScalerOptions::allow_fp16_params";
}

}  // namespace

GradScaler::GradScaler(const GradScalerOptions& options)
    : opt_(options), enabled_(options.enabled), scale_(static_cast<float>(options.init_scale)) {
  check_options();
}

void GradScaler::check_options() const {
  const auto& o = opt_;
  auto bad = [](const std::string& what) {
    throw std::invalid_argument("mixp::amp::GradScaler: " + what);
  };
  if (!(o.init_scale > 0) || !std::isfinite(static_cast<float>(o.init_scale)))
    bad(fmt::format("init_scale must be positive and finite in fp32, got {}", o.init_scale));
  if (!(o.growth_factor > 1.0) || !std::isfinite(o.growth_factor))
    bad(fmt::format("growth_factor must be > 1, got {}", o.growth_factor));
  if (!(o.backoff_factor > 0.0 && o.backoff_factor < 1.0))
    bad(fmt::format("backoff_factor must be in (0, 1), got {}", o.backoff_factor));
  if (o.growth_interval < 1)
    bad(fmt::format("growth_interval must be >= 1, got {}", o.growth_interval));
  if (!(o.min_scale >= 0) || !std::isfinite(o.min_scale))
    bad(fmt::format("min_scale must be >= 0 (0 = no floor), got {}", o.min_scale));
  if (!(o.max_scale >= 0) || std::isnan(o.max_scale))
    bad(fmt::format("max_scale must be >= 0 (0 = no cap), got {}", o.max_scale));
  if (o.max_scale > 0 && o.min_scale > o.max_scale)
    bad(fmt::format("min_scale {} is above max_scale {}", o.min_scale, o.max_scale));
  if (o.collapse_after < 0)
    bad(fmt::format("collapse_after must be >= 0 (0 = never), got {}", o.collapse_after));
  if (o.collapse_after > 0 && o.min_scale <= 0)
    bad("collapse_after counts skipped steps at min_scale; set min_scale too");
}

Tensor GradScaler::scale(const Tensor& outputs) const {
  if (!enabled_) return outputs;
  if (!outputs.defined() || !outputs.is_floating_point())
    throw std::invalid_argument("mixp::amp::GradScaler::scale: outputs must be a floating tensor");
  const Tensor wide = outputs.dtype() == DType::fp32 || outputs.dtype() == DType::fp64
                          ? outputs
                          : outputs.to(DType::fp32);
  return mul(wide, static_cast<double>(scale_));
}

GradScaler::PerOptimizer& GradScaler::state_of(const optim::Optimizer& opt) {
  for (auto& s : per_opt_)
    if (s.opt == &opt) return s;
  per_opt_.push_back(PerOptimizer{&opt});
  return per_opt_.back();
}

const GradScaler::PerOptimizer* GradScaler::find_state(const optim::Optimizer& opt) const {
  for (const auto& s : per_opt_)
    if (s.opt == &opt) return &s;
  return nullptr;
}

void GradScaler::unscale_(optim::Optimizer& opt) {
  if (!enabled_) return;
  PerOptimizer& st = state_of(opt);
  if (st.stage == Stage::unscaled)
    throw std::logic_error(
        "mixp::amp::GradScaler: unscale_() has already been called on this optimizer since the "
        "last update()");
  if (st.stage == Stage::stepped)
    throw std::logic_error("mixp::amp::GradScaler: unscale_() is being called after step()");
  // Check everything before changing anything.
  for (const optim::ParamState& p : opt.params()) {
    const Tensor g = p.param.grad();
    if (!g.defined() || opt_.allow_fp16_params) continue;
    if (g.dtype() == DType::fp16) {
      throw std::invalid_argument(
          fmt::format("mixp::amp::GradScaler::unscale_: parameter '{}' has an fp16 gradient "
                      "(PyTorch: \"Attempting to unscale FP16 gradients\"); {}",
                      p.name, fp16_alternatives()));
    }
    if (p.param.dtype() == DType::fp16 && !p.master.defined()) {
      throw std::invalid_argument(
          fmt::format("mixp::amp::GradScaler::unscale_: parameter '{}' is fp16 and the optimizer "
                      "({}) keeps no fp32 master copy of it; {}",
                      p.name, opt.name(), fp16_alternatives()));
    }
  }
  // PyTorch: inv_scale = scale.double().reciprocal().float()
  const float inv = static_cast<float>(1.0 / static_cast<double>(scale_));
  int64_t checked = 0;
  NoGradGuard ng;
  Tensor found_inf;  // one flag per optimizer, on its gradients' device, read once below
  for (const optim::ParamState& p : opt.params()) {
    const Tensor g = p.param.grad();
    if (!g.defined()) continue;
    if (!found_inf.defined()) found_inf = zeros({1}, {.device = g.device()});
    unscale_tensor(g, inv, found_inf);
    ++checked;
  }
  // One named step value per optimizer (optim/step_reductions.h): a process group's reducer
  // makes every rank skip together. Called on every rank, with 0 where no gradient was checked.
  double inf = found_inf.defined() ? found_inf.item() : 0.0;
  optim::reduce_step_values(optim::StepValue::found_inf, std::span<double>(&inf, 1));
  st.found_inf = inf != 0.0;
  // As PyTorch's found_inf_per_device: an optimizer none of whose parameters has a gradient
  // records no inf check, and step() refuses it below. With sharded gradients the check is the
  // whole model's, over every rank (a found_inf reducer), even for a rank that owns nothing.
  if (optim::has_step_reducer(optim::StepValue::found_inf)) {
    checked = std::max<int64_t>(checked, 1);
  }
  st.recorded = checked > 0;
  st.stage = Stage::unscaled;
}

bool GradScaler::step(optim::Optimizer& opt) {
  if (!enabled_) {
    opt.step();
    return true;
  }
  PerOptimizer* st = &state_of(opt);
  if (st->stage == Stage::stepped)
    throw std::logic_error(
        "mixp::amp::GradScaler: step() has already been called since the last update()");
  if (st->stage == Stage::ready) {
    unscale_(opt);
    st = &state_of(opt);
  }
  if (!st->recorded) {
    // PyTorch: "No inf checks were recorded for this optimizer." (an AssertionError). Stepping
    // would report a step that changed nothing.
    throw std::logic_error(
        "mixp::amp::GradScaler::step: no inf checks were recorded for this optimizer: none of its "
        "parameters has a gradient. Call backward() on scaler.scale(loss) before step(), and "
        "check that the optimizer holds the model's parameters");
  }
  const bool take = !st->found_inf;
  if (take) opt.step();
  st->stage = Stage::stepped;
  return take;
}

bool GradScaler::found_inf(const optim::Optimizer& opt) const {
  const PerOptimizer* s = find_state(opt);
  return s && s->found_inf;
}

bool GradScaler::found_inf_any() const {
  for (const auto& s : per_opt_)
    if (s.recorded && s.found_inf) return true;
  return false;
}

void GradScaler::update() {
  if (!enabled_) return;
  bool any = false, found = false;
  for (const auto& s : per_opt_) {
    any = any || s.recorded;
    found = found || (s.recorded && s.found_inf);
  }
  if (!any)
    throw std::logic_error(
        "mixp::amp::GradScaler::update: no inf checks were recorded since the last update(); "
        "call step(optimizer) (or unscale_) for every optimizer of the iteration first");
  per_opt_.clear();
  // torch._amp_update_scale_ (aten/src/ATen/native/cuda/AmpKernels.cu), on an fp32 scale.
  if (found) {
    const bool at_min = opt_.min_scale > 0 && static_cast<double>(scale_) <= opt_.min_scale;
    float next = static_cast<float>(static_cast<double>(scale_) * opt_.backoff_factor);
    if (opt_.min_scale > 0 && static_cast<double>(next) < opt_.min_scale)
      next = static_cast<float>(opt_.min_scale);
    scale_ = next;
    tracker_ = 0;
    ++skipped_;
    skips_at_min_ = at_min ? skips_at_min_ + 1 : 0;
    if (opt_.collapse_after > 0 && skips_at_min_ >= opt_.collapse_after) {
      throw LossScaleCollapsed(fmt::format(
          "the loss scale has collapsed: {} consecutive steps had inf/NaN gradients with the "
          "scale at its minimum {:g}, so no loss scale makes them finite. The forward pass "
          "probably overflows (an activation beyond fp16's 65504) or training diverged: use bf16 "
          "(fp32's range, no loss scaling), lower the learning rate, clip gradients, or keep the "
          "overflowing layer in fp32 (--layer-precision)",
          skips_at_min_, opt_.min_scale));
    }
    return;
  }
  skips_at_min_ = 0;
  const int64_t successful = tracker_ + 1;
  // `>=` rather than PyTorch's `==`: the same for a tracker that counts up from 0, and when the
  // interval was lowered below the tracker (set_growth_interval, or a resumed run given a shorter
  // --growth-interval) the scale grows at the next clean step instead of never again.
  if (successful >= opt_.growth_interval) {
    const float grown = static_cast<float>(static_cast<double>(scale_) * opt_.growth_factor);
    if (std::isfinite(grown)) {  // do not grow past fp32's range
      scale_ = grown;
      if (opt_.max_scale > 0 && static_cast<double>(scale_) > opt_.max_scale)
        scale_ = static_cast<float>(opt_.max_scale);
    }
    tracker_ = 0;
  } else {
    tracker_ = successful;
  }
}

void GradScaler::update(double new_scale) {
  if (!enabled_) return;
  if (!(new_scale > 0) || !std::isfinite(static_cast<float>(new_scale)))
    throw std::invalid_argument(fmt::format(
        "mixp::amp::GradScaler::update: new_scale must be positive and finite, got {}", new_scale));
  scale_ = static_cast<float>(new_scale);
  per_opt_.clear();
}

// Changes one option and validates the set; an invalid value leaves the options as they were.
template <typename T>
void GradScaler::set_option(T GradScalerOptions::*field, T value) {
  const GradScalerOptions before = opt_;
  opt_.*field = value;
  try {
    check_options();
  } catch (...) {
    opt_ = before;
    throw;
  }
}

void GradScaler::set_growth_factor(double f) {
  set_option(&GradScalerOptions::growth_factor, f);
}

void GradScaler::set_backoff_factor(double f) {
  set_option(&GradScalerOptions::backoff_factor, f);
}

void GradScaler::set_growth_interval(int64_t n) {
  set_option(&GradScalerOptions::growth_interval, n);
}

GradScaler::StateDict GradScaler::state_dict() const {
  if (!enabled_) return {};
  return {{"scale", static_cast<double>(scale_)},
          {"growth_factor", opt_.growth_factor},
          {"backoff_factor", opt_.backoff_factor},
          {"growth_interval", static_cast<double>(opt_.growth_interval)},
          {"_growth_tracker", static_cast<double>(tracker_)},
          {"min_scale", opt_.min_scale},
          {"max_scale", opt_.max_scale},
          {"skipped_steps", static_cast<double>(skipped_)},
          {"skips_at_min", static_cast<double>(skips_at_min_)}};
}

void GradScaler::load_state_dict(const StateDict& sd) {
  if (!enabled_) return;
  if (sd.empty())
    throw std::invalid_argument(
        "mixp::amp::GradScaler::load_state_dict: the state dict is empty, possibly because it was "
        "saved from a disabled GradScaler");
  auto find = [&](const char* key) -> const double* {
    for (const auto& [k, v] : sd)
      if (k == key) return &v;
    return nullptr;
  };
  auto need = [&](const char* key) {
    const double* v = find(key);
    if (!v)
      throw std::invalid_argument(
          fmt::format("mixp::amp::GradScaler::load_state_dict: missing entry '{}'", key));
    return *v;
  };
  auto count = [&](const char* key, double v) {
    if (!(v >= 0) || v != std::floor(v) || v > 9.0e15)
      throw std::invalid_argument(fmt::format(
          "mixp::amp::GradScaler::load_state_dict: '{}' must be a count, got {}", key, v));
    return static_cast<int64_t>(v);
  };
  GradScalerOptions o = opt_;
  o.init_scale = need("scale");
  o.growth_factor = need("growth_factor");
  o.backoff_factor = need("backoff_factor");
  o.growth_interval = count("growth_interval", need("growth_interval"));
  const int64_t tracker = count("_growth_tracker", need("_growth_tracker"));
  if (const double* v = find("min_scale")) o.min_scale = *v;
  if (const double* v = find("max_scale")) o.max_scale = *v;
  const int64_t skipped =
      find("skipped_steps") ? count("skipped_steps", *find("skipped_steps")) : 0;
  const int64_t at_min = find("skips_at_min") ? count("skips_at_min", *find("skips_at_min")) : 0;
  GradScaler check(o);  // validates every value before anything changes
  opt_ = o;
  scale_ = static_cast<float>(o.init_scale);
  tracker_ = tracker;
  skipped_ = skipped;
  skips_at_min_ = at_min;
}

}  // namespace mixp::amp
