// The storage version counter (tensor.h, Storage::version): every in-place entry point of the API
// bumps it, views share it, and the optimizers bump it when they write a parameter. Autocast's
// weight shadows rely on it (tests/amp/test_weight_shadows.cpp).
#include <gtest/gtest.h>

#include "mixp/amp/grad_scaler.h"
#include "mixp/mixp.h"
#include "mixp/train/checkpoint.h"

namespace mixp {
namespace {

Tensor rnd(const Shape& s, uint64_t seed) {
  Generator gen(seed);
  return randn(s, gen);
}

TEST(TensorVersion, EveryInPlaceWriteBumpsItAndViewsShareIt) {
  Tensor t = rnd({4, 6}, 1);
  const Tensor view = t.slice(0, 1, 3);
  const Tensor detached = t.detach();
  uint64_t v = t.version();
  auto bumped = [&](const char* what) {
    EXPECT_GT(t.version(), v) << what;
    EXPECT_EQ(view.version(), t.version()) << what;
    EXPECT_EQ(detached.version(), t.version()) << what;
    v = t.version();
  };
  t.zero_();
  bumped("zero_");
  t.fill_(2.0);
  bumped("fill_");
  t.copy_(rnd({4, 6}, 2));
  bumped("copy_");
  t.add_(rnd({6}, 3), 0.5);
  bumped("add_");
  t.mul_(3.0);
  bumped("mul_");
  t.set_at({1, 2}, 7.0);
  bumped("set_at");
  Tensor(view).fill_(1.0);  // a write through a view bumps the storage's counter
  bumped("fill_ on a view");
  t.bump_version();
  bumped("bump_version");
  Tensor h = rnd({8}, 4).to(DType::bf16, Round::nearest_even);
  const uint64_t hv = h.version();
  h.mul_(2.0);  // the 16-bit path (widen, scale, copy back)
  EXPECT_GT(h.version(), hv);
  // Reads and out-of-place ops do not.
  (void)t.to_double_vector();
  (void)add(t, t);
  (void)t.clone();
  EXPECT_EQ(t.version(), v);
  EXPECT_EQ(t.clone().version(), 0u);  // a new storage starts at 0
}

void set_grad(const Tensor& p, uint64_t seed) {
  Tensor(p).set_grad(rnd(p.shape(), seed));
}

TEST(TensorVersion, OptimizerStepsBumpTheParametersTheyWrite) {
  Tensor a = rnd({64}, 1).requires_grad_();
  Tensor b = rnd({64}, 2).requires_grad_();
  Tensor h = rnd({64}, 3).to(DType::bf16, Round::nearest_even).requires_grad_();  // master path
  optim::AdamW adam({a, b, h});
  set_grad(a, 10);
  set_grad(h, 11);
  const uint64_t va = a.version(), vb = b.version(), vh = h.version();
  adam.step();
  EXPECT_GT(a.version(), va);
  EXPECT_EQ(b.version(), vb);  // no gradient: not stepped, not bumped
  EXPECT_GT(h.version(), vh);

  optim::AdamOptions narrow;  // the chunked path (bf16 states)
  narrow.precision.state_dtype = DType::bf16;
  Tensor c = rnd({64}, 4).requires_grad_();
  optim::Adam chunked({c}, narrow);
  set_grad(c, 12);
  const uint64_t vc = c.version();
  chunked.step();
  EXPECT_GT(c.version(), vc);

  Tensor d = rnd({64}, 5).requires_grad_();
  optim::SGD sgd({d}, {.lr = 0.1});
  set_grad(d, 13);
  const uint64_t vd = d.version();
  sgd.step();
  EXPECT_GT(d.version(), vd);
}

TEST(TensorVersion, GradScalerUnscaleBumpsTheGradient) {
  Tensor p = rnd({32}, 1).requires_grad_();
  optim::SGD sgd({p}, {.lr = 0.1});
  set_grad(p, 2);
  const Tensor g = p.grad();
  const uint64_t vg = g.version();
  amp::GradScaler scaler({.init_scale = 4.0});
  scaler.unscale_(sgd);
  EXPECT_GT(g.version(), vg);
}

TEST(TensorVersion, LoadingModuleStateBumpsTheParameters) {
  Generator gen(1);
  nn::Linear src(8, 4, gen), dst(8, 4, gen);
  const uint64_t v = dst.weight().version();
  train::load_module_state(dst, train::module_state(src), "test");
  EXPECT_GT(dst.weight().version(), v);
  EXPECT_EQ(dst.weight().to_double_vector(), src.weight().to_double_vector());
}

}  // namespace
}  // namespace mixp
