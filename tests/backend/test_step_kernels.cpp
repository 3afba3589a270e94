// The cpu backend's training-step kernels against the ref backend's element loops
// (src/backend/ref/ref_step.cpp): bit for bit where the contract defines every element (unscale,
// found_inf, LayerNorm's 16-bit xhat), within 1e-12 relative for the fp64 sum of squares (the cpu
// backend sums in 16 partial sums, ref in one).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/kernel_compare.h"
#include "mixp/backend/backend.h"
#include "mixp/ops/ops.h"
#include "mixp/tensor/factories.h"

namespace mixp {
namespace {

Backend& ref() { return test::ref_backend(); }
Backend& cpu() { return test::cpu_backend(); }

// |x|, elementwise (the Adam second moment must not be negative).
Tensor abs_like(const Tensor& x) {
  return sqrt(mul(x, x));
}

std::string bytes(const Tensor& t) {
  return {static_cast<const char*>(t.data_ptr()), t.nbytes()};
}

// Values over many binades, with a few exact zeros, ties and (optionally) non-finite ones.
Tensor values(int64_t n, uint64_t seed, bool nonfinite) {
  Generator gen(seed);
  Tensor t = randn({n}, gen);
  std::vector<float> v = t.to_vector<float>();
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::ldexp(v[i], static_cast<int>(i % 40) - 20);
  v[3] = 0.0f;
  v[5] = -0.0f;
  if (nonfinite) {
    v[7] = std::numeric_limits<float>::infinity();
    v[11] = std::numeric_limits<float>::quiet_NaN();
  }
  return from_vector(v, {n});
}

TEST(StepKernels, UnscaleCheckMatchesRefBitForBit) {
  for (DType d : {DType::fp32, DType::fp64, DType::bf16, DType::fp16, DType::fp8_e4m3}) {
    for (bool nonfinite : {false, true}) {
      for (double inv : {1.0, 1.0 / 65536.0, 0.37}) {
        SCOPED_TRACE(std::string(name(d)) + (nonfinite ? " with inf/NaN" : "") + " inv " +
                     std::to_string(inv));
        // Above the cpu backend's parallel grain, so the threaded loop runs too.
        const Tensor src = values(70001, 1, nonfinite).to(d, Round::nearest_even);
        Tensor a = src.clone(), b = src.clone();
        Tensor fa = zeros({1}), fb = zeros({1});
        cpu().unscale_check(a, fa, inv);
        ref().unscale_check(b, fb, inv);
        EXPECT_EQ(bytes(a), bytes(b));
        // (Narrow formats overflow on the large values too.)
        bool any = false;
        for (double v : src.to_vector<double>()) any = any || !std::isfinite(v);
        EXPECT_EQ(fa.item(), any ? 1.0 : 0.0);
        EXPECT_EQ(fb.item(), fa.item());
      }
    }
  }
}

TEST(StepKernels, SumSquaresMatchesRef) {
  for (DType d : {DType::fp32, DType::fp64}) {
    for (int64_t n : {int64_t{1}, int64_t{17}, int64_t{100003}}) {
      const Tensor src = values(n, 2, false).to(d, Round::nearest_even);
      Tensor a = zeros({1}, {.dtype = DType::fp64}), b = zeros({1}, {.dtype = DType::fp64});
      cpu().sum_squares(a, src);
      ref().sum_squares(b, src);
      EXPECT_NEAR(a.item(), b.item(), 1e-12 * b.item()) << name(d) << " n " << n;
    }
  }
}

TEST(StepKernels, LayerNormXhatMatchesRefBitForBit) {
  Generator gen(3);
  const int64_t rows = 130, n = 96;  // above the cpu loop's parallel threshold
  const Tensor x = randn({rows, n}, gen), mean = randn({rows}, gen);
  const Tensor rstd = add(rand({rows}, gen), 0.5);
  for (DType low : {DType::bf16, DType::fp16}) {
    Tensor a = Tensor::empty({rows, n}, {.dtype = low}),
           b = Tensor::empty({rows, n}, {.dtype = low});
    cpu().layer_norm_xhat(a, x, mean, rstd);
    ref().layer_norm_xhat(b, x, mean, rstd);
    EXPECT_EQ(bytes(a), bytes(b)) << name(low);
  }
}

// One optimizer step on copies of the same tensors, cpu and ref; every tensor byte for byte.
struct UpdateCase {
  const char* what;
  bool chunked;
  DType param, state;
  bool master, kahan, shadow;
  Round write_back;
  UpdateRule::Kind kind;
};

TEST(StepKernels, OptimizerUpdateMatchesRefBitForBit) {
  const int64_t n = 70001;  // above the cpu loops' parallel grain and chunk sizes
  using K = UpdateRule::Kind;
  const UpdateCase cases[] = {
      {"fp32 AdamW with a bf16 shadow", false, DType::fp32, DType::fp32, false, false, true,
       Round::nearest_even, K::adam},
      {"fp32 SGD nesterov", false, DType::fp32, DType::fp32, false, false, false,
       Round::nearest_even, K::sgd},
      {"fp64 Adam", false, DType::fp64, DType::fp64, false, false, false, Round::nearest_even,
       K::adam},
      {"bf16 with an fp32 master", true, DType::bf16, DType::fp32, true, false, false,
       Round::nearest_even, K::adam},
      {"bf16-pure, bf16 states, stochastic", true, DType::bf16, DType::bf16, false, false, false,
       Round::stochastic, K::adam},
      {"bf16-pure with Kahan", true, DType::bf16, DType::fp32, false, true, false,
       Round::nearest_even, K::adam},
      {"fp16 SGD, stochastic", true, DType::fp16, DType::fp32, false, false, false,
       Round::stochastic, K::sgd},
      {"fp32 parameter, bf16 states", true, DType::fp32, DType::bf16, false, false, true,
       Round::nearest_even, K::adam},
  };
  for (const UpdateCase& c : cases) {
    SCOPED_TRACE(c.what);
    Generator gen(9);
    const Tensor w0 = mul(randn({n}, gen), 0.05);
    UpdateRule rule;
    rule.kind = c.kind;
    if (c.kind == K::adam) {
      const double lr = 1e-3, b1 = 0.9, b2 = 0.999;
      rule.s[0] = b1, rule.s[1] = b2, rule.s[2] = 1 - b1, rule.s[3] = 1 - b2, rule.s[4] = 1e-8;
      rule.s[5] = 0.0, rule.s[6] = 1 - lr * 0.01, rule.s[7] = -lr / (1 - b1 * b1);
      rule.s[8] = std::sqrt(1 - b2 * b2);
    } else {
      rule.s[0] = 0.01, rule.s[1] = 1e-4, rule.s[2] = 0.9, rule.s[3] = 1.0;
      rule.sgd_momentum = rule.sgd_nesterov = rule.sgd_weight_decay = true;
    }
    const int nslots = c.kind == K::adam ? 2 : 1;
    auto make = [&](Backend& be) {
      Generator g2(10);
      Tensor values = w0.to(c.param, Round::nearest_even).clone();  // never w0 itself
      Tensor master = c.master ? w0.clone() : Tensor();
      // Full-precision fp32 gradients where the update is in place, bf16 ones for the chunked path.
      Tensor grad =
          mul(randn({n}, g2), 0.1).to(c.chunked ? DType::bf16 : c.param, Round::nearest_even);
      Tensor comp = c.kahan ? Tensor::empty({n}, {.dtype = c.param}) : Tensor();
      if (comp.defined()) comp.fill_(0.0);
      std::vector<Tensor> slots;
      for (int k = 0; k < nslots; ++k) {
        slots.push_back(mul(abs_like(randn({n}, g2)), 1e-3).to(c.state, Round::nearest_even));
      }
      Tensor shadow = c.shadow ? Tensor::empty({n}, {.dtype = DType::bf16}) : Tensor();
      ParamUpdate u;
      u.chunked = c.chunked;
      u.values = values, u.grad = grad, u.master = master, u.comp = comp, u.shadow = shadow;
      u.slots = slots;
      u.write_back = c.write_back;
      u.seed = 1234;
      u.step = 2;
      be.optimizer_update(u, rule);
      std::vector<std::string> out{bytes(values)};
      for (const Tensor& t : {master, comp, shadow}) out.push_back(t.defined() ? bytes(t) : "");
      for (const Tensor& t : slots) out.push_back(bytes(t));
      return out;
    };
    const auto a = make(cpu()), b = make(ref());
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(a[i] == b[i]) << "tensor " << i << " differs";
  }
}

}  // namespace
}  // namespace mixp
