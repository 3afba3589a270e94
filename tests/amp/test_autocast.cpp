// Autocast: the policy table, output dtypes of every op category, nesting, enabled=false, the
// cast cache, gradients through the casts, banned ops.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <thread>

#include "mixp/mixp.h"

namespace mixp::amp {
namespace {

Tensor rnd(const Shape& s, uint64_t seed, DType dt = DType::fp32) {
  Generator gen(seed);
  Tensor t = randn(s, gen);
  return dt == DType::fp32 ? t : t.to(dt, Round::nearest_even);
}

class AutocastDtypes : public ::testing::TestWithParam<DType> {};

TEST(CastPolicyTable, EveryOpHasAPolicyAndGemmsAreLowerPrecision) {
  for (int i = 0; i < kNumOps; ++i) {
    const OpId op = static_cast<OpId>(i);
    EXPECT_EQ(kCastPolicyTable[static_cast<size_t>(i)], cast_policy(op)) << op_name(op);
    if (op_kind(op) == OpKind::gemm) {
      EXPECT_EQ(cast_policy(op), CastPolicy::lower_precision) << op_name(op);
    }
  }
  static_assert(cast_policy(OpId::softmax) == CastPolicy::fp32);
  static_assert(cast_policy(OpId::cat) == CastPolicy::promote);
  static_assert(cast_policy(OpId::reshape) == CastPolicy::none);
  static_assert(cast_policy(OpId::binary_cross_entropy, DType::fp16) == CastPolicy::banned);
  static_assert(cast_policy(OpId::binary_cross_entropy, DType::bf16) == CastPolicy::fp32);
  EXPECT_EQ(banned_alternative(OpId::binary_cross_entropy), "binary_cross_entropy_with_logits");
}

TEST_P(AutocastDtypes, OutputDtypeOfEveryCategory) {
  const DType lp = GetParam();
  const Tensor x = rnd({4, 8}, 1), w = rnd({6, 8}, 2), b = rnd({6}, 3);
  const Tensor xl = rnd({4, 8}, 4, lp);
  Autocast ac(lp);
  EXPECT_TRUE(is_autocast_enabled());
  EXPECT_EQ(autocast_dtype(), lp);
  // lower_precision
  EXPECT_EQ(linear(x, w, b).dtype(), lp);
  EXPECT_EQ(matmul(x, w.transpose(0, 1)).dtype(), lp);
  EXPECT_EQ(bmm(rnd({2, 3, 4}, 5), rnd({2, 4, 5}, 6)).dtype(), lp);
  EXPECT_EQ(conv2d(rnd({1, 2, 5, 5}, 7), rnd({3, 2, 3, 3}, 8), rnd({3}, 9), 1, 1).dtype(), lp);
  const Tensor q = rnd({1, 2, 4, 8}, 10);
  EXPECT_EQ(scaled_dot_product_attention(q, q, q).dtype(), lp);
  {
    const Tensor h = rnd({4, 5}, 11), c = rnd({4, 5}, 12), wih = rnd({20, 8}, 13),
                 whh = rnd({20, 5}, 14);
    const auto [h1, c1] = lstm_cell(x, h, c, wih, whh, rnd({20}, 15), rnd({20}, 16));
    EXPECT_EQ(h1.dtype(), lp);
    EXPECT_EQ(c1.dtype(), lp);
  }
  // fp32 even from 16-bit inputs
  EXPECT_EQ(
      batch_norm(rnd({4, 3, 2, 2}, 17, lp), Tensor(), Tensor(), rnd({3}, 18), rnd({3}, 19), true)
          .dtype(),
      DType::fp32);
  EXPECT_EQ(binary_cross_entropy_with_logits(xl, sigmoid(x)).dtype(), DType::fp32);
  EXPECT_EQ(softmax(xl, 1).dtype(), DType::fp32);
  EXPECT_EQ(log_softmax(xl, 1).dtype(), DType::fp32);
  EXPECT_EQ(exp(xl).dtype(), DType::fp32);
  EXPECT_EQ(log(add(mul(xl, xl), 1.0)).dtype(), DType::fp32);
  EXPECT_EQ(pow(xl, 2.0).dtype(), DType::fp32);
  EXPECT_EQ(layer_norm(xl, Shape{8}).dtype(), DType::fp32);
  EXPECT_EQ(sum(xl).dtype(), DType::fp32);
  EXPECT_EQ(mean(xl).dtype(), DType::fp32);
  EXPECT_EQ(mse_loss(xl, xl).dtype(), DType::fp32);
  const Tensor tgt = from_vector(std::vector<int64_t>{0, 1, 2, 3}, Shape{4});
  EXPECT_EQ(cross_entropy(xl, tgt).dtype(), DType::fp32);
  // promote: the widest input
  EXPECT_EQ(add(xl, x).dtype(), DType::fp32);
  EXPECT_EQ(mul(xl, xl).dtype(), lp);
  EXPECT_EQ(cat({xl, x}, 0).dtype(), DType::fp32);
  EXPECT_EQ(cat({xl, xl}, 0).dtype(), lp);
  // none: the input's dtype
  EXPECT_EQ(relu(xl).dtype(), lp);
  EXPECT_EQ(gelu(xl).dtype(), lp);
  EXPECT_EQ(relu(x).dtype(), DType::fp32);
  EXPECT_EQ(xl.reshape({8, 4}).dtype(), lp);
  EXPECT_EQ(xl.transpose(0, 1).contiguous().dtype(), lp);
  EXPECT_EQ(max(xl).dtype(), lp);
}

TEST(Autocast, NestingAndDisabling) {
  const Tensor x = rnd({4, 8}, 1), w = rnd({6, 8}, 2);
  EXPECT_FALSE(is_autocast_enabled());
  EXPECT_EQ(autocast_nesting(), 0);
  EXPECT_EQ(linear(x, w).dtype(), DType::fp32);
  {
    Autocast outer(DType::bf16);
    EXPECT_EQ(linear(x, w).dtype(), DType::bf16);
    {
      Autocast inner(DType::fp16);
      EXPECT_EQ(autocast_nesting(), 2);
      EXPECT_EQ(linear(x, w).dtype(), DType::fp16);
      {
        Autocast off(DType::bf16, false);
        EXPECT_FALSE(is_autocast_enabled());
        EXPECT_EQ(linear(x, w).dtype(), DType::fp32);
        // a bf16 activation from the outer region meets an fp32 weight: the engine promotes
        EXPECT_EQ(linear(x.to(DType::bf16, Round::nearest_even), w).dtype(), DType::fp32);
      }
      EXPECT_TRUE(is_autocast_enabled());
      EXPECT_EQ(linear(x, w).dtype(), DType::fp16);
    }
    EXPECT_EQ(autocast_dtype(), DType::bf16);
    EXPECT_EQ(linear(x, w).dtype(), DType::bf16);
  }
  EXPECT_FALSE(is_autocast_enabled());
  EXPECT_EQ(autocast_nesting(), 0);
  EXPECT_EQ(linear(x, w).dtype(), DType::fp32);
  EXPECT_THROW(Autocast(DType::fp32), std::invalid_argument);
}

TEST(Autocast, StateIsThreadLocal) {
  Autocast ac(DType::bf16);
  bool other_enabled = true;
  DType other_out = DType::bf16;
  std::thread th([&] {
    other_enabled = is_autocast_enabled();
    other_out = linear(rnd({2, 3}, 1), rnd({4, 3}, 2)).dtype();
  });
  th.join();
  EXPECT_FALSE(other_enabled);
  EXPECT_EQ(other_out, DType::fp32);
}

TEST(Autocast, CacheConvertsEachWeightOncePerRegion) {
  Tensor w = rnd({6, 8}, 2).requires_grad_();
  const Tensor x = rnd({4, 8}, 1);
  reset_autocast_cache_stats();
  {
    Autocast ac(DType::bf16);
    Tensor y = add(add(linear(x, w), linear(x, w)), linear(x, w));
    const AutocastCacheStats st = autocast_cache_stats();
    EXPECT_EQ(st.misses, 1);
    EXPECT_EQ(st.hits, 2);
    EXPECT_EQ(st.entries, 1);
    {
      Autocast inner(DType::bf16);  // nested: same cache
      (void)linear(x, w);
      EXPECT_EQ(autocast_cache_stats().hits, 3);
      Autocast fp16(DType::fp16);  // another dtype: another entry
      (void)linear(x, w);
      EXPECT_EQ(autocast_cache_stats().misses, 2);
    }
    // activations (non-leaves) and tensors without requires_grad are never cached
    (void)linear(x, x.slice(0, 0, 3));
    EXPECT_EQ(autocast_cache_stats().misses, 2);
  }
  EXPECT_EQ(autocast_cache_stats().entries, 0);
  {
    Autocast ac(DType::bf16);  // a new region converts again
    (void)linear(x, w);
    EXPECT_EQ(autocast_cache_stats().misses, 3);
  }
  {
    Autocast ac(AutocastOptions{.dtype = DType::bf16, .enabled = true, .cache_enabled = false});
    (void)linear(x, w);
    (void)linear(x, w);
    EXPECT_EQ(autocast_cache_stats().misses, 3);
    EXPECT_EQ(autocast_cache_stats().hits, 3);
  }
}

TEST(Autocast, CopyMadeUnderNoGradIsRemadeWhenGradientsAreNeeded) {
  Tensor w = rnd({4, 3}, 1).requires_grad_();
  const Tensor x = rnd({2, 3}, 2);
  reset_autocast_cache_stats();
  Autocast ac(DType::bf16);
  {
    NoGradGuard ng;
    (void)linear(x, w);  // cached without history
  }
  Tensor y = linear(x, w);  // a miss: the history-less copy cannot carry gradients
  EXPECT_EQ(autocast_cache_stats().misses, 2);
  sum(y).backward();
  ASSERT_TRUE(w.grad().defined());
  (void)linear(x, w);  // now a hit
  EXPECT_EQ(autocast_cache_stats().hits, 1);
}

// Issue 16: forward + backward several times inside ONE autocast region (gradient accumulation,
// PyTorch's usual loop) must work and equal one region per micro-batch. The cached weight copy's
// cast node is reused by every backward (FunctionNode::reusable).
TEST(Autocast, GradientAccumulationInsideOneRegion) {
  for (DType dt : {DType::bf16, DType::fp16}) {
    Tensor w = mul(rnd({12, 20}, 1), 0.2).requires_grad_(), b = rnd({12}, 2).requires_grad_();
    const Tensor xs[4] = {rnd({8, 20}, 3), rnd({8, 20}, 4), rnd({8, 20}, 5), rnd({8, 20}, 6)};
    auto loss_of = [&](const Tensor& x) { return mean(mul(linear(x, w, b), 0.25)); };
    {
      Autocast ac(dt);
      for (const Tensor& x : xs) loss_of(x).backward();
    }
    const std::vector<double> gw_one = w.grad().to_double_vector(),
                              gb_one = b.grad().to_double_vector();
    w.set_grad(Tensor());
    b.set_grad(Tensor());
    for (const Tensor& x : xs) {
      Autocast ac(dt);
      loss_of(x).backward();
    }
    EXPECT_EQ(w.grad().to_double_vector(), gw_one) << name(dt);
    EXPECT_EQ(b.grad().to_double_vector(), gb_one) << name(dt);
  }
}

// An optimizer step inside a region writes the weights in place (their version changes): the
// next forward in the same region must cast the new values, not reuse the stale copy.
TEST(Autocast, OptimizerStepInsideRegionRecastsTheWeights) {
  Tensor w = rnd({6, 5}, 7).requires_grad_();
  const Tensor x = rnd({3, 5}, 8);
  optim::SGD opt(std::vector<Tensor>{w}, optim::SGDOptions{.lr = 0.5});
  Autocast ac(DType::bf16);
  sum(linear(x, w)).backward();
  opt.step();
  const Tensor after = linear(x, w);
  // the same GEMM on a cast of the updated weight made by hand
  const Tensor expect = linear(x.to(DType::bf16, Round::nearest_even),
                               w.detach().to(DType::bf16, Round::nearest_even));
  EXPECT_EQ(after.to_double_vector(), expect.to_double_vector());
}

TEST(Autocast, GradientsReachFp32LeavesThroughTheCasts) {
  const Tensor x = rnd({16, 32}, 1);
  Tensor w1 = mul(rnd({24, 32}, 2), 0.2).requires_grad_(), b1 = rnd({24}, 3).requires_grad_();
  Tensor w2 = mul(rnd({10, 24}, 4), 0.2).requires_grad_();
  Generator tg(5);
  const Tensor tgt = randint(0, 10, Shape{16}, tg);
  auto step = [&](bool amp16, DType dt) {
    w1.set_grad(Tensor());
    b1.set_grad(Tensor());
    w2.set_grad(Tensor());
    Tensor loss;
    {
      Autocast ac(dt, amp16);
      // w1 is used twice (cache hit): both uses' gradients must arrive
      Tensor h = relu(linear(x, w1, b1));
      Tensor h2 = linear(x, w1);
      loss = cross_entropy(linear(add(h, h2), w2), tgt);
      EXPECT_EQ(loss.dtype(), DType::fp32);
    }
    loss.backward();
    return std::vector<Tensor>{w1.grad(), b1.grad(), w2.grad()};
  };
  const std::vector<Tensor> ref = step(false, DType::bf16);
  for (DType dt : {DType::bf16, DType::fp16}) {
    const std::vector<Tensor> got = step(true, dt);
    for (size_t i = 0; i < ref.size(); ++i) {
      ASSERT_TRUE(got[i].defined());
      EXPECT_EQ(got[i].dtype(), DType::fp32);
      const std::vector<double> a = got[i].to_double_vector(), r = ref[i].to_double_vector();
      double num = 0, den = 0;
      for (size_t j = 0; j < a.size(); ++j) {
        num += (a[j] - r[j]) * (a[j] - r[j]);
        den += r[j] * r[j];
      }
      // bf16 keeps 8 significant bits (relative rounding error 2^-9 per value, a few roundings
      // along the path); fp16 keeps 11.
      EXPECT_LT(std::sqrt(num / den), dt == DType::bf16 ? 3e-2 : 4e-3) << name(dt) << " grad " << i;
    }
  }
}

TEST(Autocast, Bf16LinearWritesTheWeightGradientInFp32) {
  // Under bf16 autocast the GEMM writes dW of the cached weight copy in fp32 (bf16 products,
  // fp32 accumulation) and the leaf takes it as it is: no rounding of dW to bf16. With
  // loss = sum(y), dY = 1 and dW[o][i] = sum_n bf16(x[n][i]); 64 bf16 values summed in fp32 are
  // within ~64 * 2^-24 relative of the exact sum, where a bf16-rounded dW would be off by up to
  // 2^-9. fp16 keeps 16-bit weight gradients (their overflow is the GradScaler's signal).
  const int64_t N = 64, I = 40, O = 24;
  const Tensor x = rnd({N, I}, 7);
  Tensor w = rnd({O, I}, 8).requires_grad_();
  Tensor loss;
  {
    Autocast ac(DType::bf16);
    Tensor y = linear(x, w);
    EXPECT_EQ(y.dtype(), DType::bf16);
    loss = sum(y);
  }
  loss.backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), DType::fp32);
  const std::vector<double> xb = x.to(DType::bf16, Round::nearest_even).to_double_vector();
  const std::vector<double> dw = w.grad().to_double_vector();
  double worst = 0;
  for (int64_t o = 0; o < O; ++o) {
    for (int64_t i = 0; i < I; ++i) {
      double ref = 0, mag = 0;
      for (int64_t n = 0; n < N; ++n) {
        ref += xb[static_cast<size_t>(n * I + i)];
        mag += std::fabs(xb[static_cast<size_t>(n * I + i)]);
      }
      worst = std::max(worst, std::fabs(dw[static_cast<size_t>(o * I + i)] - ref) / mag);
    }
  }
  EXPECT_LT(worst, 64 * 0x1.0p-24);
}

TEST(Autocast, CastAndDirectUsesOfOneWeightSumInFp32) {
  // w feeds a bf16 linear (through the cached cast) and an fp32 op directly: both gradients reach
  // w.grad, summed in fp32 (the 16-bit one is widened, the fp32 one never rounded to 16 bits).
  const Tensor x = rnd({8, 6}, 1);
  Tensor w = rnd({5, 6}, 2).requires_grad_();
  Tensor loss;
  {
    Autocast ac(DType::bf16);
    loss = add(sum(linear(x, w)), mul(sum(mul(w, w)), 1e-3));
  }
  EXPECT_EQ(loss.dtype(), DType::fp32);
  loss.backward();
  // d/dw: sum over rows of x (each output column's weight row) + 2e-3 w
  const std::vector<double> g = w.grad().to_double_vector(), wv = w.to_double_vector(),
                            xv = x.to_double_vector();
  ASSERT_EQ(w.grad().dtype(), DType::fp32);
  for (int64_t o = 0; o < 5; ++o)
    for (int64_t i = 0; i < 6; ++i) {
      double colsum = 0;
      for (int64_t r = 0; r < 8; ++r) colsum += xv[static_cast<size_t>(r * 6 + i)];
      const double want = colsum + 2e-3 * wv[static_cast<size_t>(o * 6 + i)];
      // the linear part went through bf16 (x rounded, gradient rounded): 2^-8 relative
      EXPECT_NEAR(g[static_cast<size_t>(o * 6 + i)], want, 1e-2 * (std::abs(colsum) + 1))
          << o << "," << i;
    }
}

TEST(Autocast, BannedOpNamesTheAlternativeUnderFp16) {
  const Tensor p = sigmoid(rnd({8}, 1)), t = sigmoid(rnd({8}, 2));
  {
    Autocast ac(DType::fp16);
    try {
      (void)binary_cross_entropy(p, t);
      FAIL() << "expected BannedOpError";
    } catch (const BannedOpError& e) {
      EXPECT_EQ(e.op(), OpId::binary_cross_entropy);
      EXPECT_NE(std::string(e.what()).find("binary_cross_entropy_with_logits"), std::string::npos)
          << e.what();
    }
    EXPECT_EQ(binary_cross_entropy_with_logits(rnd({8}, 3), t).dtype(), DType::fp32);
  }
  {
    Autocast ac(DType::bf16);  // bf16: runs, in fp32
    EXPECT_EQ(binary_cross_entropy(p.to(DType::bf16, Round::nearest_even), t).dtype(), DType::fp32);
  }
}

INSTANTIATE_TEST_SUITE_P(Bf16Fp16, AutocastDtypes, ::testing::Values(DType::bf16, DType::fp16),
                         [](const auto& info) { return std::string(name(info.param)); });

}  // namespace
}  // namespace mixp::amp
