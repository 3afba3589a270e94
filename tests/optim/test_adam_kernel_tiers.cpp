// The fp32 Adam kernel's tiers (generic, AVX2, AVX-512) agree bit for bit, including the tail
// and special values, so results do not depend on the machine's SIMD tier.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/adam_kernel.h"
#include "backend/cpu/sum_squares_kernel.h"
#include "mixp/format/cpu_features.h"
#include "mixp/tensor/generator.h"

namespace mixp::step_kernels {
namespace {

struct Buffers {
  std::vector<float> w, g, m, v;
};

Buffers make(int64_t n) {
  Generator gen(17);
  Buffers b;
  for (int64_t i = 0; i < n; ++i) {
    b.w.push_back(static_cast<float>(gen.normal()));
    b.g.push_back(static_cast<float>(gen.normal() * 1e-3));
    b.m.push_back(static_cast<float>(gen.normal() * 1e-4));
    b.v.push_back(static_cast<float>(gen.uniform01() * 1e-6));
  }
  // special values: zero gradient and state, a tiny v (denominator ~ eps), a NaN gradient
  if (n >= 3) {
    b.g[0] = 0.0f;
    b.m[0] = b.v[0] = 0.0f;
    b.v[1] = 1e-30f;
    b.g[2] = std::numeric_limits<float>::quiet_NaN();
  }
  return b;
}

void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    uint32_t x, y;
    std::memcpy(&x, &a[i], 4);
    std::memcpy(&y, &b[i], 4);
    ASSERT_EQ(x, y) << what << " element " << i << ": " << a[i] << " vs " << b[i];
  }
}

TEST(AdamKernel, TiersAgreeBitForBit) {
  const AdamScalars s{
      0.9f, 0.999f, 0.1f, 0.001f, 1e-8f, 0.0f, 0.99999f, -1e-3f / 0.271f, std::sqrt(0.00499f)};
  const AdamScalars l2{0.8f, 0.99f, 0.2f, 0.01f, 1e-6f, 0.1f, 1.0f, -1e-2f, 0.5f};
  std::vector<std::pair<const char*, AdamKernelF32>> tiers{{"generic", &adam_f32_generic}};
  if (cpu_features().use_avx2()) tiers.emplace_back("avx2", &adam_f32_avx2);
  if (cpu_features().use_avx512()) tiers.emplace_back("avx512", &adam_f32_avx512);
  if (tiers.size() == 1) GTEST_SKIP() << "no SIMD tier on this CPU";
  for (const AdamScalars& sc : {s, l2}) {
    for (int64_t n : {1, 7, 8, 15, 16, 17, 100, 1000}) {
      Buffers ref = make(n);
      adam_f32_generic(ref.w.data(), ref.g.data(), ref.m.data(), ref.v.data(), n, sc);
      for (size_t t = 1; t < tiers.size(); ++t) {
        Buffers b = make(n);
        tiers[t].second(b.w.data(), b.g.data(), b.m.data(), b.v.data(), n, sc);
        expect_same_bits(ref.w, b.w, tiers[t].first);
        expect_same_bits(ref.m, b.m, tiers[t].first);
        expect_same_bits(ref.v, b.v, tiers[t].first);
      }
    }
  }
}

}  // namespace
}  // namespace mixp::step_kernels

namespace mixp::step_kernels {
namespace {

// The AVX-512 sum of squares behind grad_norm against a long-double loop: the products are
// exact in fp64, so the only error is fp64 addition in another order, a few ulp of the total
// (relative 1e-14 is ~50 ulp, with margin for n = 100003 additions). Tails of every length.
TEST(SumSquaresTiers, Avx512MatchesExactSum) {
  if (!cpu_features().use_avx512()) GTEST_SKIP() << "no AVX-512";
  Generator gen(3);
  std::vector<float> g;
  for (int i = 0; i < 100003; ++i) g.push_back(static_cast<float>(gen.normal() * 1e-2));
  for (int64_t n : {0, 1, 7, 31, 32, 33, 63, 64, 65, 1000, 100003}) {
    long double ref = 0;
    for (int64_t i = 0; i < n; ++i) ref += static_cast<long double>(g[i]) * g[i];
    const double got = sum_squares_f32_avx512(g.data(), n);
    EXPECT_NEAR(got, static_cast<double>(ref), 1e-14 * static_cast<double>(ref)) << "n = " << n;
  }
  const std::vector<float> special{1.0f, std::numeric_limits<float>::infinity(), 2.0f};
  EXPECT_TRUE(std::isinf(sum_squares_f32_avx512(special.data(), 3)));
  const std::vector<float> nan{1.0f, std::numeric_limits<float>::quiet_NaN()};
  EXPECT_TRUE(std::isnan(sum_squares_f32_avx512(nan.data(), 2)));
}

}  // namespace
}  // namespace mixp::step_kernels
