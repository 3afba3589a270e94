// Fp8Autocast and the deferred scale updates (see fp8_linear.h).
#include <algorithm>
#include <mutex>
#include <vector>

#include "amp/fp8_detail.h"
#include "mixp/amp/fp8_linear.h"
#include "mixp/autograd/checkpoint.h"
#include "mixp/autograd/grad_mode.h"
#include "mixp/optim/step_reductions.h"

namespace mixp::amp {

namespace {

struct Region {
  int depth = 0;
  bool enabled = false;
  bool recompute = false;
  bool training = true;  // grad mode was on when the outermost level was entered
  std::vector<std::shared_ptr<Fp8ScalingState>> forward_used;
};

Region& region() {
  thread_local Region r;
  return r;
}

// Backward may run on another thread than the forward that recorded it: one shared list.
std::mutex& pending_mutex() {
  static std::mutex m;
  return m;
}
std::vector<std::shared_ptr<Fp8ScalingState>>& pending() {
  static std::vector<std::shared_ptr<Fp8ScalingState>> v;
  return v;
}

void add_once(std::vector<std::shared_ptr<Fp8ScalingState>>& v,
              const std::shared_ptr<Fp8ScalingState>& s) {
  if (std::find(v.begin(), v.end(), s) == v.end()) v.push_back(s);
}

// Reduces the amaxes of `states` as the named step value fp8_amax (optim/step_reductions.h),
// then updates them.
void reduce_and_update(const std::vector<std::shared_ptr<Fp8ScalingState>>& states) {
  if (!states.empty() && optim::has_step_reducer(optim::StepValue::fp8_amax)) {
    std::vector<double> amax;
    amax.reserve(states.size());
    for (const auto& s : states) amax.push_back(s->history(0));  // exact: floats
    optim::reduce_step_values(optim::StepValue::fp8_amax, amax);
    for (size_t i = 0; i < states.size(); ++i) states[i]->record_amax(float(amax[i]));
  }
  for (const auto& s : states) s->update();
}

}  // namespace

void set_fp8_amax_reducer(Fp8AmaxReducer reducer) {
  // The fp8_amax step reducer over floats (the values are fp32 amaxes, exact in double).
  if (!reducer) {
    optim::set_step_reducer(optim::StepValue::fp8_amax, nullptr);
    return;
  }
  optim::set_step_reducer(optim::StepValue::fp8_amax,
                          [r = std::move(reducer)](optim::StepValue, std::span<double> v) {
                            std::vector<float> f(v.begin(), v.end());
                            r(f);
                            for (size_t i = 0; i < v.size(); ++i) v[i] = f[i];
                          });
}

namespace detail {
void note_forward_state(const std::shared_ptr<Fp8ScalingState>& s) {
  Region& r = region();
  if (r.depth > 0) add_once(r.forward_used, s);
}
void note_backward_state(const std::shared_ptr<Fp8ScalingState>& s) {
  std::lock_guard<std::mutex> lock(pending_mutex());
  add_once(pending(), s);
}
bool records_amax() {
  const Region& r = region();
  return !r.recompute && (r.depth == 0 || r.training);
}
}  // namespace detail

void fp8_update_backward_states() {
  std::vector<std::shared_ptr<Fp8ScalingState>> todo;
  {
    std::lock_guard<std::mutex> lock(pending_mutex());
    todo.swap(pending());
  }
  reduce_and_update(todo);
}

namespace {
// A checkpointed segment recomputes in the FP8 region its forward ran in, flagged as a
// recomputation: it quantizes with the scales that forward used and records nothing
// (amp/fp8_linear.h, "Activation recomputation"; autograd/checkpoint.h).
[[maybe_unused]] const bool g_checkpoint_registered = [] {
  register_checkpoint_state([]() -> CheckpointRestorer {
    // Outside an enabled region FP8 layers compute in their usual precision: nothing to re-enter.
    if (!Fp8Autocast::is_enabled()) return [] { return CheckpointScope(); };
    return [] { return std::make_shared<Fp8Autocast>(true, /*recompute=*/true); };
  });
  return true;
}();
}  // namespace

Fp8Autocast::Fp8Autocast(bool enabled, bool recompute) {
  Region& r = region();
  prev_enabled_ = r.enabled;
  prev_recompute_ = r.recompute;
  // A recomputation runs inside backward: it neither applies pending updates nor schedules any.
  outermost_ = r.depth == 0 && !recompute;
  if (outermost_) {
    // The backward of the previous pass has ended: its grad_output updates are due.
    fp8_update_backward_states();
    r.forward_used.clear();
    r.training = GradMode::is_enabled();
  }
  ++r.depth;
  r.enabled = enabled;
  r.recompute = recompute || r.recompute;
}

Fp8Autocast::~Fp8Autocast() {
  Region& r = region();
  r.enabled = prev_enabled_;
  r.recompute = prev_recompute_;
  --r.depth;
  if (!outermost_) return;
  // TE updates the forward scales only when the region ran with gradients (a training pass).
  if (r.training && GradMode::is_enabled()) {
    reduce_and_update(r.forward_used);
  }
  r.forward_used.clear();
  r.training = true;
}

bool Fp8Autocast::is_enabled() {
  return region().enabled;
}
bool Fp8Autocast::is_recompute() {
  return region().recompute;
}

}  // namespace mixp::amp
