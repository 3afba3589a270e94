// The three tiers of the vectorized row kernels (generic, AVX2, AVX-512) against each other and
// against double-precision formulas; tiers the machine lacks are skipped.
#include <gtest/gtest.h>

#include <cmath>
#include <span>
#include <vector>

#include "backend/cpu/pool_kernels.h"
#include "backend/cpu/vec_kernels.h"
#include "mixp/backend/cpu_features.h"
#include "mixp/format/convert.h"
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
