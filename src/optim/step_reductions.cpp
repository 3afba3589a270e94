// The named step reductions and their reducers (optim/step_reductions.h).
#include "mixp/optim/step_reductions.h"

#include <array>
#include <mutex>

#include "util/enum_names.h"

namespace mixp::optim {

namespace {
struct Reducers {
  std::mutex mutex;
  std::array<StepReducer, kStepValueCount> by_value;
};
Reducers& reducers() {
  static Reducers r;
  return r;
}
constexpr mixp::detail::EnumName<StepValue> kStepValueNames[] = {
    {StepValue::found_inf, "found_inf"},
    {StepValue::grad_sum_squares, "grad_sum_squares"},
    {StepValue::fp8_amax, "fp8_amax"},
    {StepValue::loss, "loss"}};
}  // namespace

StepCombine combine_of(StepValue what) {
  switch (what) {
    case StepValue::found_inf:
    case StepValue::fp8_amax:
      return StepCombine::max;
    case StepValue::grad_sum_squares:
    case StepValue::loss:
      break;
  }
  return StepCombine::sum;
}

const char* to_string(StepValue what) {
  return mixp::detail::name_of(kStepValueNames, what);
}

void set_step_reducer(StepValue what, StepReducer reducer) {
  Reducers& r = reducers();
  const std::lock_guard lock(r.mutex);
  r.by_value[static_cast<size_t>(what)] = std::move(reducer);
}

bool has_step_reducer(StepValue what) {
  Reducers& r = reducers();
  const std::lock_guard lock(r.mutex);
  return static_cast<bool>(r.by_value[static_cast<size_t>(what)]);
}

void reduce_step_values(StepValue what, std::span<double> values) {
  StepReducer reduce;
  {
    Reducers& r = reducers();
    const std::lock_guard lock(r.mutex);
    reduce = r.by_value[static_cast<size_t>(what)];
  }
  if (reduce) reduce(what, values);
}

}  // namespace mixp::optim
