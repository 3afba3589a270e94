// Stochastic rounding (docs/formats.md "Rounding modes"; float_codec.h states mixp's exact rule):
// reproducible from (seed, index) through mixp::sr_bits, unbiased within a binomial bound, equal
// to the integer "add random bits to the dropped bits and truncate" form, and never moving values
// that are already representable. Every expectation is derived from the grid, not from mixp's SR.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "format/mode_names.h"
#include "mixp/format/minifloat.h"

namespace mixp {
namespace {

using namespace test::modes;

uint32_t sr(const FloatFormat& f, double x, uint32_t r, Overflow o = IEEE) {
  return encode_float(f, x, SR, o, r, nullptr);
}

TEST(StochasticRounding, ReproducibleFromSeedAndIndex) {
  static_assert(sr_bits(42, 7) == sr_bits(42, 7), "a pure function of (seed, index)");
  std::vector<uint32_t> a(4096), b(4096);
  const double x = 3.14159265358979;
  for (size_t i = 0; i < a.size(); ++i) a[i] = sr(kBf16, x * (1 + i * 1e-4), sr_bits(1234, i));
  for (size_t i = b.size(); i-- > 0;) b[i] = sr(kBf16, x * (1 + i * 1e-4), sr_bits(1234, i));
  EXPECT_EQ(a, b) << "order of evaluation must not matter (threads, SIMD lanes, chunks)";
  // Another seed gives another sequence, and indices past 2^32 do not repeat the first 2^32.
  size_t same_seed = 0, same_hi = 0;
  for (uint64_t i = 0; i < 4096; ++i) {
    same_seed += sr_bits(1234, i) == sr_bits(1235, i);
    same_hi += sr_bits(1234, i) == sr_bits(1234, i + (uint64_t{1} << 32));
  }
  EXPECT_LT(same_seed, 4u);
  EXPECT_LT(same_hi, 4u);
  // Bits drawn from the 64-bit seed's high word too.
  EXPECT_NE(sr_bits(1, 0), sr_bits(1 + (uint64_t{1} << 32), 0));
}

// sr_bits over consecutive indices is uniform: chi-square over 256 buckets of the top and of the
// bottom byte. 255 degrees of freedom: mean 255, sd 22.6; the bound is 8 sd above the mean.
TEST(StochasticRounding, RandomBitsAreUniform) {
  constexpr int kN = 256 * 1000;
  for (int shift : {24, 0}) {
    std::vector<int> hist(256, 0);
    for (int i = 0; i < kN; ++i) ++hist[(sr_bits(99, i) >> shift) & 0xFF];
    double chi2 = 0;
    for (int h : hist) chi2 += (h - 1000.0) * (h - 1000.0) / 1000.0;
    EXPECT_LT(chi2, 255 + 8 * 22.6) << "byte at bit " << shift;
  }
}

struct SrCase {
  const char* what;
  FloatFormat f;
  float x;
};

// The neighbours of x on the grid, found by walking codes (not by SR): down = the largest
// magnitude <= |x|, up = the next code's magnitude (the value past max finite for overflow).
void neighbours(const FloatFormat& f, double x, double* down, double* up, uint32_t* down_code) {
  uint32_t c = 0;
  while (c + 1 < f.sign_mask() && std::fabs(decode_float(f, c + 1)) <= std::fabs(x)) ++c;
  *down_code = c;
  *down = decode_float(f, c);
  *up = decode_float(f, c + 1);
}

// For each x: over 200k draws with distinct indices, the fraction rounded up is within 5 binomial
// sigma of p = (|x| - down) / ulp, so the mean result is within 5 sigma of x (unbiased).
TEST(StochasticRounding, UnbiasedWithinBinomialBound) {
  const SrCase cases[] = {
      {"bf16 near 1", kBf16, 1.0f + 0.3f * 0.0078125f},
      {"bf16 -pi", kBf16, -3.14159265f},
      {"bf16 subnormal target", kBf16, std::bit_cast<float>(0x00001234u)},
      {"bf16 between subnormals", kBf16, std::bit_cast<float>(0x00037ABCu)},
      {"fp16 0.1", kFp16, 0.1f},
      {"fp16 subnormal target", kFp16, 3.3f * 5.9604645e-8f},
      {"fp16 below min subnormal", kFp16, 0.2f * 5.9604645e-8f},
      {"fp8_e4m3 0.3", kFp8E4M3, 0.3f},
      {"fp8_e4m3 subnormal", kFp8E4M3, -0.7f / 512},
      {"fp8_e5m2 1000", kFp8E5M2, 1000.0f},
      {"fp8_e5m2 subnormal", kFp8E5M2, -3e-5f},
      {"fp4_e2m1 2.6", kFp4E2M1, 2.6f},
      {"fp6_e3m2 0.09", kFp6E3M2, 0.09f},
      {"tf32 1.00001", kTf32, 1.00001f},
  };
  constexpr int kN = 200000;
  for (const SrCase& c : cases) {
    double down, up;
    uint32_t down_code;
    neighbours(c.f, c.x, &down, &up, &down_code);
    const double ulp = up - down, ax = std::fabs(c.x);
    ASSERT_GT(ax, down) << c.what << ": the case must lie strictly between grid points";
    const double p = (ax - down) / ulp;
    const uint32_t sign = std::signbit(c.x) ? c.f.sign_mask() : 0;
    int ups = 0, others = 0;
    double sum = 0;
    for (int i = 0; i < kN; ++i) {
      const uint32_t b = sr(c.f, c.x, sr_bits(2024, i));
      if (b == (sign | (down_code + 1))) ++ups;
      else if (b != (sign | down_code)) ++others;
      sum += decode_float(c.f, b);
    }
    EXPECT_EQ(others, 0) << c.what << ": SR must give one of the two neighbours";
    const double sd = std::sqrt(kN * p * (1 - p));
    EXPECT_NEAR(ups, kN * p, 5 * sd) << c.what << " p=" << p;
    const double mean_sd = ulp * std::sqrt(p * (1 - p) / kN);
    EXPECT_NEAR(sum / kN, static_cast<double>(c.x), 5 * mean_sd) << c.what;
  }
}

// At the top of the range, rounding up means overflow: inf in IEEE mode with probability p,
// never under saturation.
TEST(StochasticRounding, OverflowProbabilityAndSaturation) {
  constexpr int kN = 100000;
  int infs = 0;
  for (int i = 0; i < kN; ++i) {
    const uint32_t r = sr_bits(7, i);
    const uint32_t b = sr(kFp16, 65512.0, r);  // a quarter of the way from 65504 to 65536
    ASSERT_TRUE(b == 0x7BFFu || b == 0x7C00u);
    infs += b == 0x7C00u;
    ASSERT_EQ(sr(kFp16, 65512.0, r, SAT), 0x7BFFu);
    ASSERT_EQ(sr(kFp8E4M3, 470.0, r, SAT), 0x7Eu);
  }
  EXPECT_NEAR(infs, kN * 0.25, 5 * std::sqrt(kN * 0.25 * 0.75));
}

// The exact rule of float_codec.h: up iff floor(f * 2^32) + r >= 2^32.
TEST(StochasticRounding, ExactThresholds) {
  const double x = std::ldexp(1.25, -24);  // fp16: a quarter ulp above the min subnormal
  EXPECT_EQ(sr(kFp16, x, 0xBFFFFFFFu), 0x0001u);
  EXPECT_EQ(sr(kFp16, x, 0xC0000000u), 0x0002u);
  // 2^-40 is 2^-16 of fp16's min subnormal: up iff r >= 2^32 - 2^16.
  EXPECT_EQ(sr(kFp16, std::ldexp(1.0, -40), 0xFFFEFFFFu), 0x0000u);
  EXPECT_EQ(sr(kFp16, std::ldexp(1.0, -40), 0xFFFF0000u), 0x0001u);
  // 32-bit resolution (docs/formats.md), not llm.c's 16: 1 + 2^-20 is 2^-17 of an e4m3 ulp
  // above 1, so it rounds up iff r >= 2^32 - 2^15.
  EXPECT_EQ(sr(kFp8E4M3, 1.0 + std::ldexp(1.0, -20), 0xFFFF7FFFu), 0x38u);
  EXPECT_EQ(sr(kFp8E4M3, 1.0 + std::ldexp(1.0, -20), 0xFFFF8000u), 0x39u);
  EXPECT_EQ(sr(kFp8E4M3, -std::ldexp(1.5, -9), 0x7FFFFFFFu), 0x81u);
  EXPECT_EQ(sr(kFp8E4M3, -std::ldexp(1.5, -9), 0x80000000u), 0x82u);
}

// CPFloat/qtorch's integer form, which the SIMD kernels use: add the top d random bits to the d
// dropped bits and truncate. For bf16 this is (u + (r >> 16)) >> 16 on the raw fp32 bits for every
// non-NaN u (subnormals and overflow to inf included); for fp16 normal results the dropped bits
// are fp32's low 13 mantissa bits.
TEST(StochasticRounding, EqualsAddRandomBitsAndTruncate) {
  uint32_t bad = 0, n = 0;
  for (uint64_t u64 = 0; u64 < (uint64_t{1} << 32); u64 += 8191) {
    const uint32_t u = static_cast<uint32_t>(u64);
    if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x7FFFFFu)) continue;  // NaN
    const uint32_t r = sr_bits(5, u);
    const float x = std::bit_cast<float>(u);
    ++n;
    bad += sr(kBf16, x, r) != ((u + (r >> 16)) >> 16);
    bad += bfloat16::from_float(x, SR, IEEE, r).bits != ((u + (r >> 16)) >> 16);
    const float ax = std::fabs(x);
    if (ax >= 0x1p-14f && ax < 65504.0f) {  // fp16 normal range, below max
      const uint32_t rtz = encode_float(kFp16, x, Round::toward_zero, IEEE, 0, nullptr);
      const uint32_t carry = ((u & 0x1FFFu) + (r >> 19)) >> 13;
      bad += sr(kFp16, x, r) != rtz + carry;  // adding 1 to a code carries into the exponent
    }
  }
  EXPECT_GT(n, 500000u);
  EXPECT_EQ(bad, 0u);
}

TEST(StochasticRounding, RepresentableValuesNeverMove) {
  for (const FloatFormat& f : {kFp16, kBf16, kFp8E4M3, kFp8E5M2, kFp4E2M1}) {
    for (uint32_t p = 0; p < (1U << f.bits()); ++p) {
      const double d = decode_float(f, p);
      if (!std::isfinite(d)) continue;
      for (uint32_t r : {0u, 1u, 0x7FFFFFFFu, 0x80000000u, 0xFFFFFFFFu}) {
        ASSERT_EQ(sr(f, d, r), p) << "pattern " << p << " r " << r;
        ASSERT_EQ(sr(f, d, r, SAT), p) << "pattern " << p << " r " << r;
      }
    }
  }
}

}  // namespace
}  // namespace mixp
