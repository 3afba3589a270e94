// The named step reductions (optim/step_reductions.h): the gradient norm, GradScaler's inf check
// and FP8's amax reducer hand their values to the reducer installed under their name, once per
// step, and use what it returns (what a process group's all-reduce plugs into).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "mixp/amp/fp8_linear.h"
#include "mixp/amp/grad_scaler.h"
#include "mixp/optim/adam.h"
#include "mixp/optim/clip_grad.h"
#include "mixp/optim/step_reductions.h"
#include "mixp/tensor/factories.h"

namespace mixp::optim {
namespace {

// Removes the reducers a test installed, whatever happens.
struct ResetReducers {
  ~ResetReducers() {
    for (StepValue v : {StepValue::found_inf, StepValue::grad_sum_squares, StepValue::fp8_amax,
                        StepValue::loss})
      set_step_reducer(v, nullptr);
  }
};

Tensor leaf_with_grad(std::vector<double> w, std::vector<double> g) {
  const auto n = static_cast<int64_t>(w.size());
  Tensor p = from_vector(w, {n}).requires_grad_();
  p.set_grad(from_vector(g, {n}));
  return p;
}

TEST(StepReductions, CombineRules) {
  EXPECT_EQ(combine_of(StepValue::found_inf), StepCombine::max);
  EXPECT_EQ(combine_of(StepValue::fp8_amax), StepCombine::max);
  EXPECT_EQ(combine_of(StepValue::grad_sum_squares), StepCombine::sum);
  EXPECT_EQ(combine_of(StepValue::loss), StepCombine::sum);
  EXPECT_STREQ(to_string(StepValue::grad_sum_squares), "grad_sum_squares");
}

TEST(StepReductions, GradNormReducesTheSumOfSquaresOnce) {
  ResetReducers reset;
  const Tensor params[2] = {leaf_with_grad({1, 2}, {3, 4}), leaf_with_grad({1}, {12})};
  EXPECT_EQ(grad_norm(params), 13.0);  // no reducer: the local norm
  int calls = 0;
  // Two ranks holding equal shards: the global sum of squares is twice the local one.
  set_step_reducer(StepValue::grad_sum_squares, [&](StepValue what, std::span<double> v) {
    EXPECT_EQ(what, StepValue::grad_sum_squares);
    ASSERT_EQ(v.size(), 1u);
    ++calls;
    v[0] *= 2;
  });
  EXPECT_DOUBLE_EQ(grad_norm(params), 13.0 * std::sqrt(2.0));
  EXPECT_EQ(calls, 1);
  // Clipping divides by the reduced norm.
  const double total = clip_grad_norm(params, 1.0);
  EXPECT_EQ(calls, 2);
  EXPECT_DOUBLE_EQ(total, 13.0 * std::sqrt(2.0));
  const double coef = 1.0 / (total + 1e-6);
  EXPECT_FLOAT_EQ(static_cast<float>(params[1].grad().item()), static_cast<float>(12 * coef));
}

TEST(StepReductions, AnotherRanksInfSkipsTheStep) {
  ResetReducers reset;
  Tensor p = leaf_with_grad({1, 2}, {0.5, 0.25});
  AdamW opt({p});
  amp::GradScaler scaler({.init_scale = 4.0});
  // This rank's gradients are finite; the reducer reports an inf from elsewhere.
  set_step_reducer(StepValue::found_inf, [](StepValue, std::span<double> v) { v[0] = 1.0; });
  scaler.unscale_(opt);
  EXPECT_TRUE(scaler.found_inf(opt));
  EXPECT_FALSE(scaler.step(opt));  // skipped, as on the rank that saw it
  EXPECT_EQ(p.to_vector<double>(), (std::vector<double>{1, 2}));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 2.0);
  // Without a reducer the local check decides.
  set_step_reducer(StepValue::found_inf, nullptr);
  p.set_grad(from_vector(std::vector<double>{0.5, 0.25}, {2}));
  scaler.unscale_(opt);
  EXPECT_FALSE(scaler.found_inf(opt));
}

TEST(StepReductions, Fp8AmaxReducerIsTheNamedHook) {
  ResetReducers reset;
  EXPECT_FALSE(has_step_reducer(StepValue::fp8_amax));
  std::vector<float> seen;
  amp::set_fp8_amax_reducer([&](std::span<float> amax) {
    seen.assign(amax.begin(), amax.end());
    for (float& a : amax) a *= 4.0f;
  });
  EXPECT_TRUE(has_step_reducer(StepValue::fp8_amax));
  std::vector<double> v{1.5, 0.25};
  reduce_step_values(StepValue::fp8_amax, v);
  EXPECT_EQ(seen, (std::vector<float>{1.5f, 0.25f}));
  EXPECT_EQ(v, (std::vector<double>{6.0, 1.0}));
  amp::set_fp8_amax_reducer(nullptr);
  EXPECT_FALSE(has_step_reducer(StepValue::fp8_amax));
}

}  // namespace
}  // namespace mixp::optim
