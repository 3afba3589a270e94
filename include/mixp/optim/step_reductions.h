// The values a training step reduces over all gradients, named, with one hook to combine them
// across processes (docs/architecture.md 3.12).
//
// A step of mixed-precision training reduces a few values over every gradient before the
// optimizer may run: whether any gradient is inf/NaN (GradScaler, amp/grad_scaler.h), the sum of
// the squares of the gradients (the global norm that clipping divides by, optim/clip_grad.h), the
// amax of every FP8 tensor that delayed scaling turns into the next scales (amp/fp8_linear.h), and
// the loss and metrics. Each is computed per process by the gradients' backend (Backend::
// unscale_check, sum_squares, the FP8 kernels) and then handed to reduce_step_values() under its
// name, which applies the reducer installed for it: the identity in a single process; an
// all-reduce over a process group (max for found_inf and fp8_amax, sum for grad_sum_squares and
// loss) in a data-parallel run whose gradients are sharded, or a device-side reduction for a
// backend that keeps the values on its device. The reducer sees every value of one kind of one
// step in one call, in the same order on every rank.
//
// Which values must cross processes depends on what each process holds: with replicated,
// already all-reduced gradients (DDP, train/data_parallel.h) found_inf and grad_sum_squares are
// the same on every rank and need no reducer; amaxes of activations differ per rank and do
// (amp::set_fp8_amax_reducer installs the fp8_amax reducer); with sharded gradients (ZeRO,
// train/data_parallel.h) found_inf does too, and the norm is summed from per-parameter terms
// (DataParallel::sharded_grad_norm) so that it stays bit-identical to the unsharded one.
#pragma once
#include <cstdint>
#include <functional>
#include <span>

namespace mixp::optim {

enum class StepValue : uint8_t {
  found_inf,         // 1 when a gradient held inf/NaN, else 0 (per optimizer); combined by max
  grad_sum_squares,  // the sum of the squares of the gradients (fp64); combined by sum
  fp8_amax,          // one amax per FP8 scaling state, in the order of the pass; combined by max
  loss,              // the step's loss times its sample count, then the sample count; by sum
};
inline constexpr int kStepValueCount = 4;

enum class StepCombine : uint8_t { max, sum };
// How the values of `what` combine across processes (above).
StepCombine combine_of(StepValue what);
const char* to_string(StepValue what);

// Combines `values` (of kind `what`) across whatever the installed reducer spans, in place.
using StepReducer = std::function<void(StepValue what, std::span<double> values)>;

// Installs `reducer` for `what` (process-wide; an empty function: none, the values stay local).
void set_step_reducer(StepValue what, StepReducer reducer);
bool has_step_reducer(StepValue what);

// Applies the reducer of `what` to `values` in place (nothing when none is installed). Called
// once per step and kind by the code that computed the values: GradScaler::unscale_ (found_inf),
// grad_norm / clip_grad_norm (grad_sum_squares), the FP8 scale update (fp8_amax).
void reduce_step_values(StepValue what, std::span<double> values);

}  // namespace mixp::optim
