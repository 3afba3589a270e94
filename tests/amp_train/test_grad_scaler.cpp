// GradScaler: PyTorch's update rule and state machine on crafted inf/NaN sequences, several
// optimizers, accumulation, the state dict, and mixp's additions (min/max scale, collapse, the
// fp16-parameter error).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "mixp/amp/grad_scaler.h"
#include "mixp/autograd/grad_mode.h"
#include "mixp/ops/ops.h"
#include "mixp/optim/adam.h"
#include "mixp/optim/sgd.h"
#include "mixp/tensor/factories.h"

namespace mixp::amp {
namespace {

using ::testing::HasSubstr;

constexpr double kInf = std::numeric_limits<double>::infinity();

// One parameter [n] with SGD(lr 1): a taken step moves it by -grad.
struct OneParam {
  Tensor w;
  std::unique_ptr<optim::SGD> opt;
  explicit OneParam(int64_t n = 4, DType dtype = DType::fp32, bool master = true) {
    w = zeros({n}, {.dtype = dtype}).requires_grad_();
    opt = std::make_unique<optim::SGD>(
        optim::NamedTensors{{"w", w}},
        optim::SGDOptions{.lr = 1.0, .precision = {.master_weights = master}});
  }
  // Sets w.grad to `scale * v` with element 0 replaced by `first` (e.g. inf or NaN).
  void grad(double scale, double first = 1.0, double v = 1.0) {
    std::vector<double> g(static_cast<size_t>(w.numel()), v * scale);
    g[0] = first == 1.0 ? v * scale : first;
    w.set_grad(from_vector(g, w.shape()));
  }
};

// PyTorch's _amp_update_scale_ on an fp32 scale (a transliteration of the CUDA kernel), for
// the sequences below.
struct RefScaler {
  float scale;
  int64_t tracker = 0;
  void update(bool found_inf, double growth, double backoff, int64_t interval) {
    if (found_inf) {
      scale = static_cast<float>(static_cast<double>(scale) * backoff);
      tracker = 0;
      return;
    }
    const int64_t successful = tracker + 1;
    if (successful == interval) {
      const float grown = static_cast<float>(static_cast<double>(scale) * growth);
      if (std::isfinite(grown)) scale = grown;
      tracker = 0;
    } else {
      tracker = successful;
    }
  }
};

TEST(GradScaler, DefaultsArePyTorchs) {
  GradScaler s;
  EXPECT_EQ(s.get_scale(), 65536.0);
  EXPECT_EQ(s.growth_factor(), 2.0);
  EXPECT_EQ(s.backoff_factor(), 0.5);
  EXPECT_EQ(s.growth_interval(), 2000);
  EXPECT_EQ(s.growth_tracker(), 0);
  EXPECT_TRUE(s.is_enabled());
}

TEST(GradScaler, ScaleMultipliesTheLossAndItsGradients) {
  GradScaler s({.init_scale = 1024.0});
  Tensor w = full({3}, 2.0).requires_grad_();
  Tensor loss = sum(mul(w, w));  // d/dw = 2w = 4
  Tensor scaled = s.scale(loss);
  EXPECT_EQ(scaled.dtype(), DType::fp32);
  EXPECT_EQ(scaled.item(), 12.0 * 1024.0);
  scaled.backward();
  EXPECT_THAT(w.grad().to_vector(), ::testing::Each(4.0 * 1024.0));
  // A bf16 loss is widened before the multiplication (it could overflow a 16-bit format).
  Tensor h = full({1}, 3.0).to(DType::fp16, Round::nearest_even);
  EXPECT_EQ(s.scale(h).dtype(), DType::fp32);
}

TEST(GradScaler, UnscalesAndStepsOnFiniteGradients) {
  OneParam p;
  GradScaler s({.init_scale = 8.0});
  p.grad(8.0, 1.0, 0.5);  // the "scaled" gradient 4 = 0.5 * 8
  EXPECT_TRUE(s.step(*p.opt));
  EXPECT_FALSE(s.found_inf(*p.opt));
  EXPECT_THAT(p.w.grad().to_vector(), ::testing::Each(0.5));  // unscaled in place
  EXPECT_THAT(p.w.to_vector(), ::testing::Each(-0.5));
  s.update();
  EXPECT_EQ(s.skipped_steps(), 0);
}

// PyTorch asserts "No inf checks were recorded for this optimizer." when step() finds no
// gradient at all (backward forgotten, or an optimizer over other parameters): so do we, instead
// of reporting a step that changed nothing.
TEST(GradScaler, StepWithoutAnyGradientIsRefused) {
  OneParam p;
  GradScaler s;
  try {
    s.step(*p.opt);
    FAIL() << "step() with no gradient must throw";
  } catch (const std::logic_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("no inf checks were recorded for this optimizer"));
  }
  EXPECT_THAT(p.w.to_vector(), ::testing::Each(0.0));  // nothing stepped
}

TEST(GradScaler, SkipsTheStepOnInfOrNanAndBacksOff) {
  for (double bad : {kInf, -kInf, std::nan("")}) {
    SCOPED_TRACE(bad);
    OneParam p;
    GradScaler s;
    p.grad(1.0, bad);
    EXPECT_FALSE(s.step(*p.opt));
    EXPECT_TRUE(s.found_inf(*p.opt));
    EXPECT_THAT(p.w.to_vector(), ::testing::Each(0.0));  // the parameters are untouched
    EXPECT_EQ(p.opt->step_count(), 0);
    s.update();
    EXPECT_EQ(s.get_scale(), 32768.0);
    EXPECT_EQ(s.growth_tracker(), 0);
    EXPECT_EQ(s.skipped_steps(), 1);
  }
}

TEST(GradScaler, NanFoundInALargeGradientOnEveryThreadPath) {
  // Past the parallel grain, the inf check is a reduction over threads.
  OneParam p(1 << 17);
  GradScaler s;
  std::vector<double> g(1 << 17, 1.0);
  g[(1 << 17) - 3] = std::nan("");
  p.w.set_grad(from_vector(g, p.w.shape()));
  s.unscale_(*p.opt);
  EXPECT_TRUE(s.found_inf(*p.opt));
}

TEST(GradScaler, UpdateRuleOnACraftedSequence) {
  // growth interval 3: grows after 3 clean steps in a row; any inf resets the count.
  const std::vector<int> seq = {0, 0, 0, 0, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0};
  GradScaler s({.init_scale = 4.0, .growth_interval = 3});
  RefScaler ref{4.0f};
  OneParam p;
  std::vector<double> trace;
  for (int bad : seq) {
    p.grad(s.get_scale(), bad ? kInf : 1.0);
    const bool stepped = s.step(*p.opt);
    EXPECT_EQ(stepped, !bad);
    s.update();
    ref.update(bad, 2.0, 0.5, 3);
    EXPECT_EQ(s.get_scale(), static_cast<double>(ref.scale));
    EXPECT_EQ(s.growth_tracker(), ref.tracker);
    trace.push_back(s.get_scale());
  }
  // Hand-checked: 4 -> (3 clean) 8 -> clean, inf 4 -> 2 clean, inf 2, inf 1 -> 3 clean 2 -> 3
  // clean 4 -> inf 2 -> 3 clean 4.
  EXPECT_EQ(trace, (std::vector<double>{4, 4, 8, 8, 4, 4, 4, 2, 1, 1, 1, 2, 2, 2, 4, 2, 2, 2, 4}));
  EXPECT_EQ(s.skipped_steps(), 4);
}

TEST(GradScaler, GrowthIsRefusedPastFp32Range) {
  GradScaler s({.init_scale = std::ldexp(1.0, 127), .growth_interval = 1});
  OneParam p;
  p.grad(1.0);
  s.step(*p.opt);
  s.update();
  EXPECT_EQ(s.get_scale(), std::ldexp(1.0, 127));  // 2^128 is inf in fp32
  EXPECT_EQ(s.growth_tracker(), 0);
}

TEST(GradScaler, StateMachineErrorsAreClear) {
  OneParam p;
  GradScaler s;
  p.grad(1.0);
  s.unscale_(*p.opt);
  EXPECT_THAT([&] { s.unscale_(*p.opt); },
              ::testing::ThrowsMessage<std::logic_error>(
                  HasSubstr("unscale_() has already been called on this optimizer since the "
                            "last update()")));
  EXPECT_TRUE(s.step(*p.opt));  // uses the earlier unscale: the gradient is divided once
  EXPECT_NEAR(p.w.to_vector()[0], -1.0 / 65536.0, 0);
  EXPECT_THAT([&] { s.unscale_(*p.opt); }, ::testing::ThrowsMessage<std::logic_error>(HasSubstr(
                                               "unscale_() is being called after step()")));
  EXPECT_THAT([&] { s.step(*p.opt); },
              ::testing::ThrowsMessage<std::logic_error>(
                  HasSubstr("step() has already been called since the last update()")));
  s.update();
  EXPECT_THAT([&] { s.update(); },
              ::testing::ThrowsMessage<std::logic_error>(HasSubstr("no inf checks were recorded")));
  // After update the cycle starts again.
  p.grad(1.0);
  EXPECT_TRUE(s.step(*p.opt));
  s.update();
}

TEST(GradScaler, SeveralOptimizersOneUpdate) {
  OneParam a, b;
  GradScaler s({.init_scale = 16.0, .growth_interval = 2});
  // Iteration 1: a is finite, b has an inf. a steps, b does not, and the scale backs off once.
  a.grad(16.0, 1.0, 1.0);
  b.grad(16.0, kInf);
  EXPECT_TRUE(s.step(*a.opt));
  EXPECT_FALSE(s.step(*b.opt));
  EXPECT_TRUE(s.found_inf_any());
  s.update();
  EXPECT_EQ(s.get_scale(), 8.0);  // halved once, not once per optimizer
  EXPECT_THAT(a.w.to_vector(), ::testing::Each(-1.0));
  EXPECT_THAT(b.w.to_vector(), ::testing::Each(0.0));
  // Iterations 2 and 3: both clean; the tracker counts iterations, not optimizer steps.
  for (int it = 0; it < 2; ++it) {
    a.grad(8.0);
    b.grad(8.0);
    s.unscale_(*a.opt);  // explicit unscale for one, implicit for the other
    EXPECT_TRUE(s.step(*a.opt));
    EXPECT_TRUE(s.step(*b.opt));
    s.update();
  }
  EXPECT_EQ(s.get_scale(), 16.0);
  EXPECT_EQ(s.skipped_steps(), 1);
  // An optimizer without any gradient records no check: step() refuses it (PyTorch: "No inf
  // checks were recorded for this optimizer"; StepWithoutAnyGradientIsRefused).
  OneParam c;
  EXPECT_THROW(s.step(*c.opt), std::logic_error);
}

TEST(GradScaler, AccumulationUnscalesTheSumOnce) {
  GradScaler s({.init_scale = 256.0});
  Tensor w = full({2}, 1.0).requires_grad_();
  optim::SGD opt(optim::NamedTensors{{"w", w}}, {.lr = 1.0});
  for (double k : {3.0, 5.0}) s.scale(mul(sum(w), k)).backward();  // d/dw = 3 + 5
  EXPECT_THAT(w.grad().to_vector(), ::testing::Each(8.0 * 256.0));
  s.unscale_(opt);
  EXPECT_THAT(w.grad().to_vector(), ::testing::Each(8.0));
  EXPECT_TRUE(s.step(opt));
  s.update();
  EXPECT_THAT(w.to_vector(), ::testing::Each(-7.0));
  // An inf in any micro-batch poisons the accumulated sum: the whole step is skipped.
  opt.zero_grad();
  s.scale(mul(sum(w), 1.0)).backward();
  Tensor g = w.grad();
  {
    NoGradGuard ng;
    g.add_(from_vector(std::vector<double>{0.0, kInf}, {2}));
  }
  s.scale(mul(sum(w), 1.0)).backward();
  EXPECT_FALSE(s.step(opt));
  s.update();
  EXPECT_EQ(s.get_scale(), 128.0);
  EXPECT_THAT(w.to_vector(), ::testing::Each(-7.0));
}

TEST(GradScaler, MinAndMaxScale) {
  GradScaler lo({.init_scale = 2.0, .min_scale = 1.0});
  OneParam p;
  for (int i = 0; i < 3; ++i) {
    p.grad(1.0, kInf);
    lo.step(*p.opt);
    lo.update();
  }
  EXPECT_EQ(lo.get_scale(), 1.0);
  EXPECT_EQ(lo.skipped_steps(), 3);
  EXPECT_EQ(lo.skips_at_min(), 2);  // the 2nd and 3rd were at the minimum already
  GradScaler hi({.init_scale = 1024.0, .growth_interval = 1, .max_scale = 3000.0});
  for (int i = 0; i < 3; ++i) {
    p.grad(1.0);
    hi.step(*p.opt);
    hi.update();
  }
  EXPECT_EQ(hi.get_scale(), 3000.0);
}

TEST(GradScaler, CollapseIsAClearError) {
  GradScaler s({.init_scale = 4.0, .min_scale = 1.0, .collapse_after = 3});
  OneParam p;
  auto bad_step = [&] {
    p.grad(1.0, std::nan(""));
    s.step(*p.opt);
    s.update();
  };
  bad_step();  // 2
  bad_step();  // 1
  bad_step();  // at the minimum: 1 of 3
  bad_step();  // 2 of 3
  // A clean step resets the count.
  p.grad(1.0);
  s.step(*p.opt);
  s.update();
  EXPECT_EQ(s.skips_at_min(), 0);
  bad_step();
  bad_step();
  try {
    bad_step();
    FAIL() << "expected LossScaleCollapsed";
  } catch (const LossScaleCollapsed& e) {
    EXPECT_THAT(e.what(), HasSubstr("the loss scale has collapsed: 3 consecutive steps"));
    EXPECT_THAT(e.what(), HasSubstr("use bf16"));
  }
  EXPECT_THROW(GradScaler({.collapse_after = 3}), std::invalid_argument);  // needs min_scale
}

TEST(GradScaler, StateDictRoundTripContinuesIdentically) {
  const GradScalerOptions o{.init_scale = 64.0, .growth_interval = 3, .min_scale = 1.0};
  GradScaler a(o);
  OneParam p;
  const std::vector<int> first = {0, 1, 0, 0}, second = {0, 0, 1, 0, 0, 0, 1};
  for (int bad : first) {
    p.grad(1.0, bad ? kInf : 1.0);
    a.step(*p.opt);
    a.update();
  }
  const GradScaler::StateDict sd = a.state_dict();
  std::vector<std::string> keys;
  for (const auto& [k, v] : sd) keys.push_back(k);
  EXPECT_THAT(keys, ::testing::IsSupersetOf({"scale", "growth_factor", "backoff_factor",
                                             "growth_interval", "_growth_tracker"}));
  GradScaler b;  // defaults: everything comes from the dict
  b.load_state_dict(sd);
  EXPECT_EQ(b.get_scale(), a.get_scale());
  EXPECT_EQ(b.growth_tracker(), a.growth_tracker());
  EXPECT_EQ(b.growth_interval(), 3);
  EXPECT_EQ(b.options().min_scale, 1.0);
  EXPECT_EQ(b.skipped_steps(), 1);
  for (int bad : second) {
    for (GradScaler* s : {&a, &b}) {
      p.grad(1.0, bad ? kInf : 1.0);
      s->step(*p.opt);
      s->update();
    }
    EXPECT_EQ(a.get_scale(), b.get_scale());
    EXPECT_EQ(a.growth_tracker(), b.growth_tracker());
  }
  EXPECT_EQ(a.state_dict(), b.state_dict());
  EXPECT_THAT([&] { b.load_state_dict({}); }, ::testing::ThrowsMessage<std::invalid_argument>(
                                                  HasSubstr("the state dict is empty")));
  EXPECT_THAT(
      [&] {
        b.load_state_dict({{"scale", 2.0}});
      },
      ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr("missing entry")));
  GradScaler::StateDict bad = sd;
  bad[0].second = -1.0;
  EXPECT_THROW(b.load_state_dict(bad), std::invalid_argument);
  EXPECT_EQ(b.state_dict(), a.state_dict());  // a failed load changed nothing
}

TEST(GradScaler, GrowthIntervalLoweredBelowTheTrackerGrowsAtTheNextCleanStep) {
  // A resumed run given a shorter --growth-interval: the tracker carried over from the checkpoint
  // may already be past the new interval. The next clean step grows the scale (PyTorch's
  // `successful == interval` would never grow again), then the new interval counts from 0.
  GradScaler s({.init_scale = 64.0, .growth_interval = 10});
  OneParam p;
  auto clean = [&] {
    p.grad(1.0);
    s.step(*p.opt);
    s.update();
  };
  for (int i = 0; i < 6; ++i) clean();
  ASSERT_EQ(s.growth_tracker(), 6);
  s.set_growth_interval(3);
  clean();
  EXPECT_EQ(s.get_scale(), 128.0);
  EXPECT_EQ(s.growth_tracker(), 0);
  clean();
  clean();
  EXPECT_EQ(s.get_scale(), 128.0);
  clean();
  EXPECT_EQ(s.get_scale(), 256.0);
}

TEST(GradScaler, Fp16ParametersWithoutMasterAreRefusedNamingTheAlternatives) {
  OneParam pure(4, DType::fp16, /*master=*/false);
  pure.grad(1.0);
  GradScaler s;
  try {
    s.unscale_(*pure.opt);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("parameter 'w' is fp16"));
    EXPECT_THAT(e.what(), HasSubstr("Autocast(DType::fp16)"));
    EXPECT_THAT(e.what(), HasSubstr("fp16-o2"));
    EXPECT_THAT(e.what(), HasSubstr("bf16"));
  }
  // With an fp32 master copy it is the standard O2 setup.
  OneParam o2(4, DType::fp16, /*master=*/true);
  o2.grad(1.0);
  EXPECT_NO_THROW(s.unscale_(*o2.opt));
  // An fp16 gradient is PyTorch's "Attempting to unscale FP16 gradients".
  OneParam f32;
  f32.w.set_grad(ones({4}, {.dtype = DType::fp16}));
  GradScaler s2;
  EXPECT_THAT([&] { s2.unscale_(*f32.opt); }, ::testing::ThrowsMessage<std::invalid_argument>(
                                                  HasSubstr("Attempting to unscale FP16")));
  // Opting in (pure fp16, Apex O3).
  GradScaler s3({.allow_fp16_params = true});
  EXPECT_NO_THROW(s3.unscale_(*pure.opt));
}

TEST(GradScaler, NarrowGradientsAreUnscaledInFp32) {
  OneParam p(4, DType::bf16, true);
  p.w.set_grad(full({4}, 3.0 * 1024.0, {.dtype = DType::bf16}));
  GradScaler s({.init_scale = 1024.0});
  s.unscale_(*p.opt);
  EXPECT_EQ(p.w.grad().dtype(), DType::bf16);
  EXPECT_THAT(p.w.grad().to_vector(), ::testing::Each(3.0));
  EXPECT_FALSE(s.found_inf(*p.opt));
}

TEST(GradScaler, DisabledIsTransparent) {
  GradScaler s({.enabled = false});
  Tensor x = full({1}, 3.0);
  EXPECT_TRUE(s.scale(x).is_same(x));
  OneParam p;
  p.grad(1.0, kInf);
  EXPECT_TRUE(s.step(*p.opt));  // no check at all: the optimizer steps
  s.update();
  EXPECT_EQ(s.get_scale(), 1.0);
  EXPECT_TRUE(s.state_dict().empty());
  EXPECT_NO_THROW(s.load_state_dict({}));
}

TEST(GradScaler, BadOptionsAreRefused) {
  EXPECT_THROW(GradScaler({.init_scale = 0.0}), std::invalid_argument);
  EXPECT_THROW(GradScaler({.init_scale = 1e39}), std::invalid_argument);  // inf in fp32
  EXPECT_THROW(GradScaler({.growth_factor = 1.0}), std::invalid_argument);
  EXPECT_THROW(GradScaler({.backoff_factor = 1.0}), std::invalid_argument);
  EXPECT_THROW(GradScaler({.growth_interval = 0}), std::invalid_argument);
  EXPECT_THROW(GradScaler({.min_scale = 8.0, .max_scale = 4.0}), std::invalid_argument);
  GradScaler s;
  EXPECT_THROW(s.set_growth_interval(0), std::invalid_argument);
  EXPECT_EQ(s.growth_interval(), 2000);  // unchanged
  s.set_growth_factor(4.0);
  EXPECT_EQ(s.growth_factor(), 4.0);
}

TEST(GradScaler, ManualScale) {
  GradScaler s;
  s.update(512.0);
  EXPECT_EQ(s.get_scale(), 512.0);
  EXPECT_THROW(s.update(0.0), std::invalid_argument);
}

}  // namespace
}  // namespace mixp::amp
