// Optimizer mechanics: state dicts (round trip, mismatch errors), zero_grad, skipped parameters,
// fp64 parameters, low-precision parameters with master weights and stochastic write-back,
// option validation.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "mixp/autograd/grad_mode.h"
#include "mixp/format/dtype.h"
#include "mixp/ops/ops.h"
#include "mixp/optim/adam.h"
#include "mixp/optim/sgd.h"
#include "mixp/tensor/allocator.h"
#include "mixp/tensor/factories.h"

namespace mixp::optim {
namespace {

using ::testing::HasSubstr;

NamedTensors make_params(uint64_t seed, DType dtype = DType::fp32) {
  Generator g(seed);
  return {{"w", randn({4, 3}, g, {.dtype = dtype}).requires_grad_()},
          {"b", randn({3}, g, {.dtype = dtype}).requires_grad_()}};
}

void set_grads(const NamedTensors& ps, uint64_t seed) {
  Generator g(seed);
  for (auto [n, p] : ps)
    p.set_grad(
        randn(p.shape(), g, {.dtype = p.dtype() == DType::fp64 ? DType::fp64 : DType::fp32}));
}

TEST(Optimizer, StateDictNamesAndRoundTrip) {
  NamedTensors a = make_params(1), b = make_params(1);
  AdamW oa(a, {.lr = 1e-2}), ob(b, {.lr = 5e-3});
  for (int s = 0; s < 3; ++s) {
    set_grads(a, 100 + s);
    oa.step();
  }
  const StateDict sd = oa.state_dict();
  std::vector<std::string> names;
  for (auto& [n, t] : sd.tensors) names.push_back(n);
  EXPECT_THAT(names,
              ::testing::ElementsAre("w.exp_avg", "w.exp_avg_sq", "b.exp_avg", "b.exp_avg_sq"));
  EXPECT_EQ(*sd.find_scalar("step"), 3.0);
  EXPECT_EQ(*sd.find_scalar("w.step"), 3.0);
  EXPECT_DOUBLE_EQ(*sd.find_scalar("lr"), 1e-2);
  // Bring b to a's parameters and state; from there both must evolve identically.
  {
    NoGradGuard ng;
    for (size_t i = 0; i < a.size(); ++i) b[i].second.copy_(a[i].second);
  }
  ob.load_state_dict(sd);
  EXPECT_EQ(ob.step_count(), 3);
  EXPECT_DOUBLE_EQ(ob.lr(), 1e-2);
  for (int s = 0; s < 2; ++s) {
    set_grads(a, 200 + s);
    set_grads(b, 200 + s);
    oa.step();
    ob.step();
  }
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(a[i].second.to_double_vector(), b[i].second.to_double_vector());
  // state_dict is a snapshot: stepping does not change it.
  const double before = sd.tensors[0].second.at({0, 0});
  set_grads(a, 300);
  oa.step();
  EXPECT_EQ(sd.tensors[0].second.at({0, 0}), before);
}

TEST(Optimizer, LoadStateDictMismatches) {
  NamedTensors a = make_params(1);
  Adam opt(a);
  StateDict good = opt.state_dict();
  auto expect_error = [&](StateDict sd, const std::string& what) {
    try {
      opt.load_state_dict(sd);
      FAIL() << "no error for " << what;
    } catch (const std::invalid_argument& e) {
      EXPECT_THAT(e.what(), HasSubstr(what));
    }
  };
  StateDict missing = good;
  missing.tensors.pop_back();
  expect_error(missing, "missing tensor 'b.exp_avg_sq'");
  StateDict extra = good;
  extra.tensors.emplace_back("c.exp_avg", zeros({2}));
  expect_error(extra, "unexpected tensor 'c.exp_avg'");
  StateDict shape = good;
  shape.tensors[0].second = zeros({3, 4});
  expect_error(shape, "'w.exp_avg' has shape [3, 4], expected [4, 3]");
  StateDict no_step = good;
  no_step.scalars.erase(no_step.scalars.begin());
  expect_error(no_step, "missing scalar 'step'");
  // SGD state does not load into Adam.
  NamedTensors c = make_params(1);
  SGD sgd(c, {.lr = 0.1, .momentum = 0.9});
  expect_error(sgd.state_dict(), "missing tensor 'w.exp_avg'");
  EXPECT_NO_THROW(opt.load_state_dict(good));
}

TEST(Optimizer, ZeroGradAndSkippedParameters) {
  NamedTensors ps = make_params(2);
  SGD opt(ps, {.lr = 0.1, .momentum = 0.9});
  set_grads(ps, 5);
  ps[1].second.set_grad(Tensor());  // b has no gradient: untouched, its step count stays 0
  const std::vector<double> b0 = ps[1].second.to_double_vector();
  opt.step();
  EXPECT_EQ(ps[1].second.to_double_vector(), b0);
  EXPECT_EQ(opt.params()[0].step, 1);
  EXPECT_EQ(opt.params()[1].step, 0);
  opt.zero_grad(/*set_to_none=*/false);
  EXPECT_TRUE(ps[0].second.grad().defined());
  EXPECT_EQ(sum(ps[0].second.grad()).item(), 0.0);
  opt.zero_grad();
  EXPECT_FALSE(ps[0].second.grad().defined());
}

TEST(Optimizer, UnnamedParametersAreNumbered) {
  Generator g(3);
  std::vector<Tensor> ps{randn({2}, g).requires_grad_(), randn({2}, g).requires_grad_()};
  Adam opt(ps);
  EXPECT_EQ(opt.params()[1].name, "1");
  EXPECT_NE(opt.state_dict().find_tensor("1.exp_avg"), nullptr);
}

TEST(Optimizer, Fp64ParametersKeepFp64State) {
  NamedTensors ps = make_params(4, DType::fp64);
  AdamW opt(ps, {.lr = 1e-3});
  set_grads(ps, 6);
  const double w0 = ps[0].second.at({0, 0}), g0 = ps[0].second.grad().at({0, 0});
  opt.step();
  EXPECT_EQ(opt.params()[0].slots[0].dtype(), DType::fp64);
  // First AdamW step: m_hat = g, v_hat = g^2, so w = w (1 - lr wd) - lr g / (|g| + eps).
  const double want = w0 * (1 - 1e-3 * 0.01) - 1e-3 * g0 / (std::fabs(g0) + 1e-8);
  EXPECT_NEAR(ps[0].second.at({0, 0}), want, 1e-15);
}

TEST(Optimizer, LowPrecisionParametersUseMasterWeights) {
  NamedTensors ps = make_params(7, DType::bf16);
  SGD opt(ps, {.lr = 1e-3});
  ASSERT_TRUE(opt.params()[0].master.defined());
  EXPECT_EQ(opt.params()[0].master.dtype(), DType::fp32);
  EXPECT_EQ(opt.params()[0].master.to_double_vector(),
            ps[0].second.to_double_vector());  // exact widening
  // Updates smaller than half a bf16 ulp accumulate in the master and show up once they add up.
  for (int s = 0; s < 10; ++s) {
    for (auto& [n, p] : ps) p.set_grad(full(p.shape(), 1.0));
    opt.step();
  }
  const Tensor& master = opt.params()[0].master;
  const std::vector<double> mv = master.to_double_vector(), pv = ps[0].second.to_double_vector();
  for (size_t i = 0; i < mv.size(); ++i) {
    EXPECT_EQ(pv[i], Tensor(from_vector(std::vector<double>{mv[i]}, {1}))
                         .to(DType::bf16, Round::nearest_even)
                         .item());
  }
  EXPECT_NE(opt.state_dict().find_tensor("w.master"), nullptr);
}

TEST(Optimizer, StochasticWriteBackRoundsToNeighbours) {
  // Pure bf16 (no master): the update is rounded stochastically, so tiny steps move the value
  // sometimes and the mean over many elements follows the exact update.
  const int64_t n = 4096;
  NamedTensors ps{{"w", ones({n}, {.dtype = DType::bf16}).requires_grad_()}};
  SGD opt(ps,
          {.lr = 1.0,
           .precision = {.master_weights = false, .write_back = Round::stochastic, .seed = 42}});
  EXPECT_FALSE(opt.params()[0].master.defined());
  ps[0].second.set_grad(full({n}, 1.0 / 1024));  // bf16 spacing below 1 is 2^-8; update = 2^-10
  opt.step();
  const std::vector<double> v = ps[0].second.to_double_vector();
  double mean = 0;
  for (double x : v) {
    EXPECT_TRUE(x == 1.0 || x == 1.0 - 1.0 / 256) << x;
    mean += x / static_cast<double>(n);
  }
  EXPECT_NEAR(mean, 1.0 - 1.0 / 1024, 3e-4);  // E = exact; binomial sd = 2^-8 * sqrt(.25 * .75 / n)
  // Nearest-even write-back would not have moved at all.
  NamedTensors qs{{"w", ones({n}, {.dtype = DType::bf16}).requires_grad_()}};
  SGD opt2(qs, {.lr = 1.0, .precision = {.master_weights = false}});
  qs[0].second.set_grad(full({n}, 1.0 / 1024));
  opt2.step();
  EXPECT_EQ(qs[0].second.at({0}), 1.0);
}

TEST(Optimizer, InvalidArguments) {
  NamedTensors ps = make_params(1);
  EXPECT_THROW(SGD(ps, {.lr = -1}), std::invalid_argument);
  EXPECT_THROW(SGD(ps, {.lr = 0.1, .momentum = 0, .nesterov = true}), std::invalid_argument);
  EXPECT_THROW(Adam(ps, {.beta1 = 1.0}), std::invalid_argument);
  NamedTensors dup{ps[0], {"again", ps[0].second}};
  EXPECT_THROW(Adam{dup}, std::invalid_argument);
  NamedTensors ints{{"i", zeros({2}, {.dtype = DType::int64})}};
  EXPECT_THROW(Adam{ints}, std::invalid_argument);
  Adam opt(ps);
  EXPECT_THROW(opt.set_lr(std::nan("")), std::invalid_argument);
  EXPECT_EQ(Adam(ps).weight_decay(), 0.0);
  EXPECT_EQ(AdamW(ps).weight_decay(), 0.01);
  EXPECT_EQ(AdamW(ps, {.weight_decay = 0.0}).weight_decay(), 0.0);
  EXPECT_EQ(AdamW(ps).name(), "adamw");
}

}  // namespace
}  // namespace mixp::optim

namespace mixp::optim {
namespace {

TEST(Optimizer, StepsAllocateNothingAfterTheFirst) {
  // docs/architecture.md 7: no allocation in the training loop after the first step. The update of
  // fp32 parameters (and of bf16 ones through their masters) works in place.
  for (DType dt : {DType::fp32, DType::bf16}) {
    NamedTensors ps = make_params(9, dt);
    AdamW opt(ps, {.lr = 1e-3});
    set_grads(ps, 1);
    opt.step();
    const int64_t before = allocator_stats().allocs;
    for (int s = 0; s < 3; ++s) opt.step();
    EXPECT_EQ(allocator_stats().allocs, before) << name(dt);
  }
}

}  // namespace
}  // namespace mixp::optim
