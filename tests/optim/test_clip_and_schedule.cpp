// clip_grad_norm against a hand computation, and every learning-rate schedule at chosen steps.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>

#include "mixp/optim/clip_grad.h"
#include "mixp/optim/lr_schedule.h"
#include "mixp/tensor/factories.h"

namespace mixp::optim {
namespace {

using ::testing::HasSubstr;

std::vector<Tensor> params_with_grads(const std::vector<std::vector<double>>& grads) {
  std::vector<Tensor> ps;
  for (const auto& g : grads) {
    Tensor p = zeros({static_cast<int64_t>(g.size())}).requires_grad_();
    p.set_grad(from_vector(g, {static_cast<int64_t>(g.size())}));
    ps.push_back(p);
  }
  return ps;
}

TEST(ClipGradNorm, NormAndScalingByHand) {
  // grads (3, 4) and (12): total norm sqrt(9 + 16 + 144) = 13.
  auto ps = params_with_grads({{3, 4}, {12}});
  Tensor no_grad = zeros({4}).requires_grad_();  // skipped
  ps.push_back(no_grad);
  EXPECT_DOUBLE_EQ(grad_norm(ps), 13.0);
  const double total = clip_grad_norm(ps, 6.5);
  EXPECT_DOUBLE_EQ(total, 13.0);
  const double coef = 6.5 / (13.0 + 1e-6);
  EXPECT_NEAR(ps[0].grad().at({0}), 3 * coef, 1e-6);
  EXPECT_NEAR(ps[0].grad().at({1}), 4 * coef, 1e-6);
  EXPECT_NEAR(ps[1].grad().at({0}), 12 * coef, 1e-6);
  EXPECT_NEAR(grad_norm(ps), 6.5, 1e-5);
  EXPECT_FALSE(no_grad.grad().defined());
}

TEST(ClipGradNorm, BelowThresholdUntouched) {
  auto ps = params_with_grads({{0.3, -0.4}});
  EXPECT_NEAR(clip_grad_norm(ps, 1.0), 0.5, 1e-7);
  EXPECT_FLOAT_EQ(static_cast<float>(ps[0].grad().at({0})), 0.3f);
  EXPECT_FLOAT_EQ(static_cast<float>(ps[0].grad().at({1})), -0.4f);
}

TEST(ClipGradNorm, NonFiniteReturnedWithoutScaling) {
  auto ps = params_with_grads({{1.0, std::numeric_limits<double>::infinity()}, {2.0}});
  EXPECT_TRUE(std::isinf(clip_grad_norm(ps, 1.0)));
  EXPECT_EQ(ps[1].grad().at({0}), 2.0);
  auto qs = params_with_grads({{1.0, std::nan("")}, {2.0}});
  EXPECT_TRUE(std::isnan(clip_grad_norm(qs, 1.0)));
  EXPECT_EQ(qs[1].grad().at({0}), 2.0);
}

TEST(ClipGradNorm, LargeGradientsAndNamedOverload) {
  // 1e30^2 overflows fp32 but not the double accumulation.
  auto ps = params_with_grads({{1e30, 1e30}});
  std::vector<std::pair<std::string, Tensor>> named{{"w", ps[0]}};
  const double total = clip_grad_norm(named, 1.0);
  EXPECT_NEAR(total / (std::sqrt(2.0) * 1e30), 1.0, 1e-6);
  EXPECT_NEAR(grad_norm(named), 1.0, 1e-5);
  // A large parameter (parallel reduction path).
  Tensor big = zeros({100000}).requires_grad_();
  big.set_grad(full({100000}, 0.5));
  std::vector<Tensor> one{big};
  EXPECT_NEAR(grad_norm(one), 0.5 * std::sqrt(100000.0), 1e-6);
  EXPECT_THROW(clip_grad_norm(one, 0.0), std::invalid_argument);
}

TEST(LrSchedule, Constant) {
  LrSchedule s{.kind = ScheduleKind::constant, .base_lr = 0.1};
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(1000000), 0.1);
  s.warmup_steps = 4;
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.025);
  EXPECT_DOUBLE_EQ(s.lr_at(3), 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(4), 0.1);
}

TEST(LrSchedule, Cosine) {
  LrSchedule s{.kind = ScheduleKind::cosine, .base_lr = 1.0, .total_steps = 100, .min_lr = 0.1};
  EXPECT_DOUBLE_EQ(s.lr_at(0), 1.0);
  EXPECT_NEAR(s.lr_at(50), 0.55, 1e-12);  // halfway: mean of base and min
  EXPECT_NEAR(s.lr_at(25), 0.1 + 0.45 * (1 + std::cos(std::numbers::pi / 4)), 1e-12);
  EXPECT_NEAR(s.lr_at(100), 0.1, 1e-12);
  EXPECT_NEAR(s.lr_at(1000), 0.1, 1e-12);
  for (int64_t t = 1; t <= 100; ++t) EXPECT_LE(s.lr_at(t), s.lr_at(t - 1));
}

TEST(LrSchedule, WarmupCosine) {
  LrSchedule s{.kind = ScheduleKind::warmup_cosine,
               .base_lr = 6e-4,
               .warmup_steps = 10,
               .total_steps = 110,
               .min_lr = 6e-5};
  EXPECT_DOUBLE_EQ(s.lr_at(0), 6e-5);   // (0 + 1) / 10 of base
  EXPECT_DOUBLE_EQ(s.lr_at(4), 3e-4);   // 5 / 10
  EXPECT_DOUBLE_EQ(s.lr_at(9), 6e-4);   // last warmup step reaches base
  EXPECT_DOUBLE_EQ(s.lr_at(10), 6e-4);  // decay starts at progress 0
  EXPECT_NEAR(s.lr_at(60), (6e-4 + 6e-5) / 2, 1e-15);
  EXPECT_NEAR(s.lr_at(110), 6e-5, 1e-15);
  // cosine with the same warmup is the same function
  LrSchedule c = s;
  c.kind = ScheduleKind::cosine;
  for (int64_t t : {0, 5, 10, 33, 77, 110, 200}) EXPECT_DOUBLE_EQ(c.lr_at(t), s.lr_at(t));
}

TEST(LrSchedule, Linear) {
  LrSchedule s{.kind = ScheduleKind::linear,
               .base_lr = 1.0,
               .warmup_steps = 0,
               .total_steps = 10,
               .min_lr = 0.0};
  EXPECT_DOUBLE_EQ(s.lr_at(0), 1.0);
  EXPECT_DOUBLE_EQ(s.lr_at(5), 0.5);
  EXPECT_DOUBLE_EQ(s.lr_at(10), 0.0);
}

TEST(LrSchedule, ParseAndErrors) {
  EXPECT_EQ(parse_schedule_kind("cosine"), ScheduleKind::cosine);
  EXPECT_EQ(parse_schedule_kind("warmup-cosine"), ScheduleKind::warmup_cosine);
  EXPECT_EQ(to_string(ScheduleKind::linear), "linear");
  for (const auto& n : schedule_kind_names()) EXPECT_EQ(to_string(parse_schedule_kind(n)), n);
  try {
    parse_schedule_kind("step");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("warmup_cosine"));
  }
  LrSchedule s{.kind = ScheduleKind::cosine, .base_lr = 1.0};
  EXPECT_THROW(s.lr_at(0), std::invalid_argument);  // no total_steps
  s.total_steps = 10;
  EXPECT_THROW(s.lr_at(-1), std::invalid_argument);
}

}  // namespace
}  // namespace mixp::optim
