// The three tiers of the vectorized row kernels (generic, AVX2, AVX-512) against each other and
// against double-precision formulas; tiers the machine lacks are skipped.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "backend/cpu/pool_kernels.h"
#include "backend/cpu/vec_kernels.h"
#include "mixp/format/convert.h"
#include "mixp/format/cpu_features.h"
#include "mixp/tensor/generator.h"

namespace mixp {
namespace {

std::vector<const vec::Kernels*> tiers() {
  std::vector<const vec::Kernels*> t{&vec::kernels_generic()};
  if (cpu_features().use_avx2()) t.push_back(&vec::kernels_avx2());
  if (cpu_features().use_avx512()) t.push_back(&vec::kernels_avx512());
  return t;
}

std::vector<float> values(int64_t n, double scale, uint64_t seed) {
  Generator g(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<float>(g.normal() * scale);
  return v;
}

// Relative error bound for the polynomial exp and the functions built on it: a few ulp.
constexpr double kUlp4 = 4.0 * 0x1.0p-23;

TEST(VecTiers, UnaryAgainstDouble) {
  const int64_t n = 1003;  // not a multiple of any vector width
  const std::vector<float> x = values(n, 5.0, 1);
  std::vector<float> y(n);
  for (const auto* k : tiers()) {
    SCOPED_TRACE(k->tier);
    k->unary(UnaryOp::exp, y.data(), x.data(), n);
    for (int64_t i = 0; i < n; ++i)
      EXPECT_NEAR(y[i], std::exp(double(x[i])), kUlp4 * std::exp(double(x[i])));
    k->unary(UnaryOp::tanh, y.data(), x.data(), n);
    for (int64_t i = 0; i < n; ++i)
      EXPECT_NEAR(y[i], std::tanh(double(x[i])), 1e-6 + kUlp4 * std::fabs(std::tanh(double(x[i]))));
    k->unary(UnaryOp::sigmoid, y.data(), x.data(), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y[i], 1.0 / (1.0 + std::exp(-double(x[i]))), 2e-7);
    k->unary(UnaryOp::gelu, y.data(), x.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const double v = x[i],
                   ref = 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
      EXPECT_NEAR(y[i], ref, 1e-6 * (1 + std::fabs(ref)));
    }
  }
}

// GELU (tanh approximation) and its derivative over a wide range, every tier (the AVX-512 tier
// has its own intrinsics kernel; the others run the sigmoid-form loops of vec_kernels.inc),
// against the formula in double. Tolerance: both are one polynomial exp (~2 ulp), one division
// and a few FMAs in fp32, and the sigmoid form has no cancellation, so the error is a few ulp of
// the result plus a few ulp of the largest term (x or g for the derivative): 1e-6 (8 ulp at 1)
// relative to 1 + |ref| bounds it with margin; measured max ~1e-7 over 2^20 normal(0, 3) inputs
// (the former tanh-form kernels: 5.5e-7 on the derivative).
TEST(VecTiers, GeluAndGradientAgainstDouble) {
  std::vector<float> x = values(4099, 3.0, 11);
  for (float v : {0.f, -0.f, 1e-30f, -1e-30f, 1e-4f, -1e-4f, 5.f, -5.f, 9.9f, -9.9f, 20.f, -20.f,
                  80.f, -80.f, 1e4f, -1e4f, 1e10f, -1e10f})
    x.push_back(v);
  const int64_t n = static_cast<int64_t>(x.size());
  const std::vector<float> g = values(n, 1.0, 12);
  std::vector<float> y(n), gi(n);
  const double c = 0.7978845608028654, a = 0.044715;
  for (const auto* k : tiers()) {
    SCOPED_TRACE(k->tier);
    k->unary(UnaryOp::gelu, y.data(), x.data(), n);
    k->unary_bwd(UnaryOp::gelu, gi.data(), g.data(), x.data(), nullptr, n);
    for (int64_t i = 0; i < n; ++i) {
      const double v = x[i], u = c * (v + a * v * v * v), t = std::tanh(u);
      const double ref = 0.5 * v * (1 + t);
      // 1 - tanh^2 via exp in the tails, where 1 - t*t would cancel to 0 in double too.
      const double sech2 = std::fabs(u) > 15 ? 4.0 * std::exp(-2.0 * std::fabs(u)) : 1 - t * t;
      const double dref =
          double(g[i]) * (0.5 * (1 + t) + 0.5 * v * sech2 * c * (1 + 3 * a * v * v));
      ASSERT_TRUE(std::isfinite(y[i]) && std::isfinite(gi[i])) << "x = " << v;
      EXPECT_NEAR(y[i], ref, 1e-6 * (1 + std::fabs(ref))) << "x = " << v;
      EXPECT_NEAR(gi[i], dref, 1e-6 * (1 + std::fabs(dref)) * (1 + std::fabs(g[i]))) << "x = " << v;
    }
    // The left tail is -0 or a tiny negative number, never NaN; NaN propagates.
    const std::vector<float> special{-1e30f, NAN, INFINITY};
    std::vector<float> ys(3);
    k->unary(UnaryOp::gelu, ys.data(), special.data(), 3);
    EXPECT_LE(ys[0], 0.f);
    EXPECT_GT(ys[0], -1e-30f);
    EXPECT_TRUE(std::isnan(ys[1]));
    EXPECT_EQ(ys[2], INFINITY);
  }
}

// The spacing of fp32 values at |v| (one ulp of the fp32 result v).
double ulp32(double v) {
  const double a = std::fabs(v);
  if (a < 0x1p-126) return 0x1p-149;
  return std::ldexp(1.0, std::ilogb(a) - 23);
}

// sin and cos, every tier, against libm in double: the kernels compute in double (range
// reduction accurate to ~1e-16, Taylor polynomials to 5e-17) and round once, so the result is
// within one ulp of the correctly rounded value (measured: within half an ulp plus ~1e-9 ulp, so
// only the rare near-ties can land on the other neighbour). Dense over [-20, 20] (step 1e-4),
// wide normal(0, 1e4) values, the 2^19 boundary of the vectorized path and huge arguments (the
// libm fallback). The derivatives (g cos x, -g sin x) round twice more: within 2 ulp.
TEST(VecTiers, SinCosAgainstDouble) {
  std::vector<float> x;
  for (int i = -200000; i <= 200000; ++i) x.push_back(static_cast<float>(i) * 1e-4f);
  const std::vector<float> wide = values(20000, 1e4, 13);
  x.insert(x.end(), wide.begin(), wide.end());
  for (float v : {524287.f, 524288.f, 524290.f, -524290.f, 1e6f, -3e7f, 1e30f, -1e30f, 1.5707964f,
                  3.1415927f, 4.712389f, 1e-30f, 0.f, -0.f})
    x.push_back(v);
  const int64_t n = static_cast<int64_t>(x.size());
  const std::vector<float> g = values(n, 1.0, 14);
  std::vector<float> ys(n), yc(n), gs(n), gc(n);
  for (const auto* k : tiers()) {
    SCOPED_TRACE(k->tier);
    k->unary(UnaryOp::sin, ys.data(), x.data(), n);
    k->unary(UnaryOp::cos, yc.data(), x.data(), n);
    k->unary_bwd(UnaryOp::sin, gs.data(), g.data(), x.data(), nullptr, n);
    k->unary_bwd(UnaryOp::cos, gc.data(), g.data(), x.data(), nullptr, n);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double v = x[i], s = std::sin(v), c = std::cos(v);
      const double ds = double(g[i]) * c, dc = -double(g[i]) * s;
      const bool ok = std::fabs(ys[i] - s) <= ulp32(s) && std::fabs(yc[i] - c) <= ulp32(c) &&
                      std::fabs(gs[i] - ds) <= 2 * ulp32(ds) &&
                      std::fabs(gc[i] - dc) <= 2 * ulp32(dc);
      if (!ok && bad++ < 5) {
        ADD_FAILURE() << "x = " << v << ": sin " << ys[i] << " vs " << s << ", cos " << yc[i]
                      << " vs " << c << ", g cos " << gs[i] << " vs " << ds << ", -g sin " << gc[i]
                      << " vs " << dc;
      }
    }
    EXPECT_EQ(bad, 0);
    const std::vector<float> special{INFINITY, -INFINITY, NAN};
    std::vector<float> y3(3);
    for (UnaryOp op : {UnaryOp::sin, UnaryOp::cos}) {
      k->unary(op, y3.data(), special.data(), 3);
      for (float v : y3) EXPECT_TRUE(std::isnan(v));
    }
  }
}

// The exact GELU 0.5 x (1 + erf(x / sqrt 2)) and its derivative, every tier, against libm's
// erfc/exp in double. The kernels compute erf in double from a degree-24 polynomial (a Chebyshev
// interpolant) whose relative error is below 3.5e-10 (1/170 ulp of fp32) for |t| <= 5.5 and clamp
// it to +-1 beyond (erf(5.5) = 1 - 7.4e-15), then round once: for x >= 0 the result is within one
// ulp. For x < 0, 1 + erf cancels, so the series' error becomes an absolute error of up to 0.5
// |x| 3.5e-10 in the result (PyTorch's fp32 kernel: up to 0.5 |x| 6e-8, an ulp of erf near 1, and 0
// for every x < -5.54, where fp32's erf is -1). The derivative's density term uses the fp32
// polynomial exp: a few ulp, plus the same absolute floor from the cdf. Dense over [-10, 10] (step
// 1e-4) plus normal(0, 3) and extreme values.
TEST(VecTiers, GeluErfAndGradientAgainstDouble) {
  std::vector<float> x;
  for (int i = -100000; i <= 100000; ++i) x.push_back(static_cast<float>(i) * 1e-4f);
  const std::vector<float> more = values(20000, 3.0, 15);
  x.insert(x.end(), more.begin(), more.end());
  for (float v : {1e-30f, -1e-30f, 1e-4f, -1e-4f, 5.65f, -5.65f, 5.66f, -5.66f, 13.f, -13.f, 40.f,
                  -40.f, 1e4f, -1e4f, 1e10f, -1e10f})
    x.push_back(v);
  const int64_t n = static_cast<int64_t>(x.size());
  const std::vector<float> g = values(n, 1.0, 16);
  std::vector<float> y(n), gi(n);
  for (const auto* k : tiers()) {
    SCOPED_TRACE(k->tier);
    k->unary(UnaryOp::gelu_erf, y.data(), x.data(), n);
    k->unary_bwd(UnaryOp::gelu_erf, gi.data(), g.data(), x.data(), nullptr, n);
    int64_t bad = 0;
    double worst_pos_ulps = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double v = x[i], cdf = 0.5 * std::erfc(-v / std::sqrt(2.0));
      const double ref = v * cdf;
      const double pdf_term = v * std::exp(-0.5 * v * v) * 0.3989422804014327;
      const double dref = double(g[i]) * (cdf + pdf_term);
      const double tol = ulp32(ref) + 2e-10 * std::fabs(v);
      const double dtol =
          std::fabs(g[i]) * (1e-6 * (cdf + std::fabs(pdf_term)) + 2e-10) + 2 * ulp32(dref);
      if (v >= 0) worst_pos_ulps = std::max(worst_pos_ulps, std::fabs(y[i] - ref) / ulp32(ref));
      const bool ok = std::isfinite(y[i]) && std::isfinite(gi[i]) && std::fabs(y[i] - ref) <= tol &&
                      std::fabs(gi[i] - dref) <= dtol;
      if (!ok && bad++ < 5) {
        ADD_FAILURE() << "x = " << v << ": gelu " << y[i] << " vs " << ref << " (tol " << tol
                      << "), gelu' * g " << gi[i] << " vs " << dref << " (tol " << dtol << ")";
      }
    }
    EXPECT_EQ(bad, 0);
    EXPECT_LE(worst_pos_ulps, 1.0);
    const std::vector<float> special{-1e30f, NAN, INFINITY};
    std::vector<float> ys(3);
    k->unary(UnaryOp::gelu_erf, ys.data(), special.data(), 3);
    EXPECT_LE(ys[0], 0.f);
    EXPECT_GT(ys[0], -1e-30f);
    EXPECT_TRUE(std::isnan(ys[1]));
    EXPECT_EQ(ys[2], INFINITY);
  }
}

// The bf16-storage GELU kernels (AVX-512 tier) against what the cpu backend otherwise does:
// widen, the same tier's fp32 kernel, round to nearest even. Bit for bit over every one of the
// 2^16 patterns as x (forward; backward with g from a fixed pattern) and as g (backward).
TEST(VecTiers, GeluBf16MatchesWidenComputeNarrow) {
  for (const auto* k : tiers()) {
    if (!k->gelu_bf16) continue;
    SCOPED_TRACE(k->tier);
    const int64_t n = 1 << 16;
    std::vector<uint16_t> x(n), g(n), y(n), gi(n), yr(n), gir(n);
    for (int64_t i = 0; i < n; ++i) {
      x[i] = static_cast<uint16_t>(i);
      g[i] = static_cast<uint16_t>((i * 40503 + 7) & 0xFFFF);
    }
    auto reference = [&](const std::vector<uint16_t>& xs, const std::vector<uint16_t>& gs,
                         std::vector<uint16_t>& fwd, std::vector<uint16_t>& bwd) {
      std::vector<float> xf(n), gf(n), yf(n), gif(n);
      convert_to_f32(DType::bf16, xs.data(), std::span<float>(xf));
      convert_to_f32(DType::bf16, gs.data(), std::span<float>(gf));
      k->unary(UnaryOp::gelu, yf.data(), xf.data(), n);
      k->unary_bwd(UnaryOp::gelu, gif.data(), gf.data(), xf.data(), nullptr, n);
      const ConvertOptions rne{Round::nearest_even, Overflow::ieee};
      convert_f32_to(DType::bf16, std::span<const float>(yf), fwd.data(), rne);
      convert_f32_to(DType::bf16, std::span<const float>(gif), bwd.data(), rne);
    };
    for (int pass = 0; pass < 2; ++pass) {
      // pass 0: every pattern as x; pass 1: every pattern as g, x a spread of values
      std::vector<uint16_t> xs = x, gs = g;
      if (pass == 1) {
        std::swap(xs, gs);
        for (auto& v : xs) v = static_cast<uint16_t>(0x3C00 + (v % 0x0900));  // |x| in [2^-7, 2^11)
      }
      reference(xs, gs, yr, gir);
      k->gelu_bf16(y.data(), xs.data(), n);
      k->gelu_bwd_bf16(gi.data(), gs.data(), xs.data(), n);
      int bad_f = 0, bad_b = 0;
      for (int64_t i = 0; i < n; ++i) {
        bad_f += y[i] != yr[i];
        bad_b += gi[i] != gir[i];
      }
      EXPECT_EQ(bad_f, 0) << "forward, pass " << pass;
      EXPECT_EQ(bad_b, 0) << "backward, pass " << pass;
    }
  }
}

TEST(VecTiers, ExpSpecialValues) {
  const std::vector<float> x{-INFINITY, -1000.f, -87.5f, -87.0f, 0.f, 88.0f, 88.8f, INFINITY, NAN};
  std::vector<float> y(x.size());
  for (const auto* k : tiers()) {
    k->unary(UnaryOp::exp, y.data(), x.data(), static_cast<int64_t>(x.size()));
    EXPECT_EQ(y[0], 0.f);
    EXPECT_EQ(y[1], 0.f);
    EXPECT_EQ(y[4], 1.f);
    EXPECT_TRUE(std::isinf(y[6]));
    EXPECT_TRUE(std::isinf(y[7]));
    EXPECT_TRUE(std::isnan(y[8]));
    EXPECT_NEAR(y[3], std::exp(-87.0), 1e-6 * std::exp(-87.0));
  }
}

TEST(VecTiers, TiersAgree) {
  const int64_t rows = 7, n = 77;
  const std::vector<float> x = values(rows * n, 3.0, 2), g = values(rows * n, 1.0, 3),
                           w = values(n, 1.0, 4);
  auto run = [&](const vec::Kernels* k) {
    std::vector<float> out;
    std::vector<float> y(rows * n), gi(rows * n), mean(rows), rstd(rows), dw(n, 0.f), db(n, 0.f);
    k->softmax_rows(y.data(), x.data(), rows, n, false);
    out.insert(out.end(), y.begin(), y.end());
    k->softmax_bwd_rows(gi.data(), g.data(), y.data(), rows, n, false);
    out.insert(out.end(), gi.begin(), gi.end());
    k->softmax_rows(y.data(), x.data(), rows, n, true);
    out.insert(out.end(), y.begin(), y.end());
    k->layer_norm_rows(y.data(), mean.data(), rstd.data(), x.data(), w.data(), w.data(), rows, n,
                       1e-5f);
    out.insert(out.end(), y.begin(), y.end());
    k->layer_norm_bwd_rows(gi.data(), dw.data(), db.data(), g.data(), x.data(), w.data(),
                           mean.data(), rstd.data(), rows, n);
    out.insert(out.end(), gi.begin(), gi.end());
    out.insert(out.end(), dw.begin(), dw.end());
    out.push_back(k->logsumexp(x.data(), n));
    out.push_back(k->sum(x.data(), n));
    return out;
  };
  const std::vector<float> base = run(&vec::kernels_generic());
  for (const auto* k : tiers()) {
    const std::vector<float> o = run(k);
    ASSERT_EQ(o.size(), base.size());
    for (size_t i = 0; i < o.size(); ++i)
      EXPECT_NEAR(o[i], base[i], 1e-5 * (1 + std::fabs(base[i]))) << k->tier << " " << i;
  }
}

TEST(VecTiers, MaxPoolAvx512MatchesPortable) {
  if (!cpu_features().use_avx512()) GTEST_SKIP() << "no AVX-512";
  const int64_t W = 38, OH = 9, OW = 19;  // tails in both directions
  std::vector<float> x = values(2 * OH * W, 1.0, 5), g = values(OH * OW, 1.0, 6);
  x[0] = x[1];                                                       // a tie
  x[5] = NAN;                                                        // a NaN
  x[2 * W + 8] = x[2 * W + 9] = x[3 * W + 8] = x[3 * W + 9] = 1.5f;  // a 4-way tie
  std::vector<float> y1(OH * OW), y2(OH * OW), g1(2 * OH * W, -1.f), g2(2 * OH * W, -1.f);
  vec::kernels_generic().maxpool2x2(y1.data(), x.data(), W, OH, OW);
  pool::maxpool2x2_avx512(y2.data(), x.data(), W, OH, OW);
  for (size_t i = 0; i < y1.size(); ++i) {
    if (std::isnan(y1[i]))
      EXPECT_TRUE(std::isnan(y2[i]));
    else
      EXPECT_EQ(y1[i], y2[i]) << i;
  }
  vec::kernels_generic().maxpool2x2_bwd(g1.data(), g.data(), x.data(), W, OH, OW);
  pool::maxpool2x2_bwd_avx512(g2.data(), g.data(), x.data(), W, OH, OW);
  EXPECT_EQ(g1, g2);
}

}  // namespace
}  // namespace mixp
