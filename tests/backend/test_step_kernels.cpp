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

#include "mixp/backend/backend.h"
#include "mixp/ops/ops.h"
#include "mixp/tensor/factories.h"

namespace mixp {
namespace {

Backend& ref() { return get_backend(BackendKind::ref); }
Backend& cpu() { return get_backend(BackendKind::cpu); }

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
        SCOPED_TRACE(std::string(name(d)) + (nonfinite ? " with inf/NaN" : "") +
                     " inv " + std::to_string(inv));
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
    Tensor a = Tensor::empty({rows, n}, {.dtype = low}), b = Tensor::empty({rows, n}, {.dtype = low});
    cpu().layer_norm_xhat(a, x, mean, rstd);
    ref().layer_norm_xhat(b, x, mean, rstd);
    EXPECT_EQ(bytes(a), bytes(b)) << name(low);
  }
}

}  // namespace
}  // namespace mixp
