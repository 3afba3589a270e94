// Spot checks of the generic encoder against the facts in docs/formats.md. Exhaustive sweeps and
// the independent numpy/torch fixtures live in test_exhaustive_*.cpp.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "format/mode_names.h"
#include "mixp/format/minifloat.h"

namespace mixp {
namespace {

using namespace test::modes;

uint32_t enc(const FloatFormat& f, double x, Round r = RNE, Overflow o = IEEE, uint32_t rb = 0) {
  return encode_float(f, x, r, o, rb, nullptr);
}

TEST(Fp16, Constants) {
  EXPECT_EQ(enc(kFp16, 65504.0), 0x7BFFu);
  EXPECT_EQ(enc(kFp16, std::ldexp(1.0, -14)), 0x0400u);
  EXPECT_EQ(enc(kFp16, std::ldexp(1.0, -24)), 0x0001u);
  EXPECT_EQ(enc(kFp16, HUGE_VAL), 0x7C00u);
  EXPECT_EQ(enc(kFp16, std::numeric_limits<double>::quiet_NaN()), 0x7E00u);
}

TEST(Fp16, OverflowThreshold) {
  EXPECT_EQ(enc(kFp16, 65519.99), 0x7BFFu);
  EXPECT_EQ(enc(kFp16, 65520.0), 0x7C00u);  // tie rounds to even = inf
  EXPECT_EQ(enc(kFp16, 65520.0, RNE, SAT), 0x7BFFu);
  EXPECT_EQ(enc(kFp16, -1e9, Round::toward_zero), 0xFBFFu);  // IEEE RTZ overflow -> max finite
}

TEST(Fp16, SubnormalTies) {
  EXPECT_EQ(enc(kFp16, std::ldexp(1.0, -25)), 0x0000u);       // exactly half min subnormal: even (0)
  EXPECT_EQ(enc(kFp16, std::ldexp(1.5, -25)), 0x0001u);
  EXPECT_EQ(enc(kFp16, std::ldexp(3.0, -25)), 0x0002u);       // 1.5 ulp ties to even 2
  ConvertStatus st;
  encode_float(kFp16, 1e-30, RNE, IEEE, 0, &st);
  EXPECT_EQ(st, ConvertStatus::underflow);
}

TEST(Bf16, Pi) {
  ConvertStatus st;
  auto b = bfloat16::from_double(3.14159265, RNE, IEEE, 0, &st);
  EXPECT_EQ(b.bits, 0x4049);
  EXPECT_EQ(b.to_float(), 3.140625f);
  EXPECT_EQ(st, ConvertStatus::inexact);
}

TEST(Bf16, NanKeepsSign) {
  const float neg_nan = std::bit_cast<float>(0xFFC00001u);
  EXPECT_EQ(bfloat16::from_float(neg_nan, RNE, IEEE).bits, 0xFFC0);
  // Payload only in the low 16 bits must still be NaN, not inf.
  const float low_nan = std::bit_cast<float>(0x7F800001u);
  EXPECT_EQ(bfloat16::from_float(low_nan, RNE, IEEE).bits, 0x7FC0);
}

TEST(Fp8E4M3, Thresholds) {
  EXPECT_EQ(enc(kFp8E4M3, 448.0), 0x7Eu);
  EXPECT_EQ(enc(kFp8E4M3, 464.0), 0x7Eu);         // tie to even stays at max
  EXPECT_EQ(enc(kFp8E4M3, 464.0001), 0x7Fu);      // NaN, non-saturating
  EXPECT_EQ(enc(kFp8E4M3, 1e6, RNE, SAT), 0x7Eu);
  EXPECT_EQ(enc(kFp8E4M3, -HUGE_VAL, RNE, SAT), 0xFEu);
  EXPECT_EQ(enc(kFp8E4M3, -HUGE_VAL), 0xFFu);
  EXPECT_EQ(enc(kFp8E4M3, std::ldexp(1.0, -9)), 0x01u);
  EXPECT_EQ(enc(kFp8E4M3, std::ldexp(1.0, -6)), 0x08u);
}

TEST(Fp8E5M2, Thresholds) {
  EXPECT_EQ(enc(kFp8E5M2, 57344.0), 0x7Bu);
  EXPECT_EQ(enc(kFp8E5M2, 61439.0), 0x7Bu);
  EXPECT_EQ(enc(kFp8E5M2, 61440.0), 0x7Cu);
  EXPECT_EQ(enc(kFp8E5M2, 61440.0, RNE, SAT), 0x7Bu);
  EXPECT_EQ(enc(kFp8E5M2, std::ldexp(1.0, -16)), 0x01u);
}

TEST(Fp4E2M1, ValuesAndSaturation) {
  const double values[] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (uint32_t b = 0; b < 8; ++b) {
    EXPECT_EQ(decode_float(kFp4E2M1, b), values[b]);
    EXPECT_EQ(decode_float(kFp4E2M1, b | 8), -values[b]);
  }
  EXPECT_EQ(enc(kFp4E2M1, 100.0), 0x7u);  // always saturates: no inf
  EXPECT_EQ(enc(kFp4E2M1, 5.0), 0x6u);    // tie between 4 (even) and 6
}

TEST(Stochastic, ExactValuesNeverMove) {
  for (uint32_t r : {0u, 1u, 0x80000000u, 0xFFFFFFFFu}) {
    EXPECT_EQ(enc(kBf16, 1.0, Round::stochastic, IEEE, r), 0x3F80u);
  }
  // 1 + 2^-9 is a quarter of a bf16 ulp above 1: rounds up iff r >= 0.75 * 2^32.
  const double x = 1.0 + std::ldexp(1.0, -9);
  EXPECT_EQ(enc(kBf16, x, Round::stochastic, IEEE, 0xBFFFFFFFu), 0x3F80u);
  EXPECT_EQ(enc(kBf16, x, Round::stochastic, IEEE, 0xC0000000u), 0x3F81u);
}

TEST(Tf32, RoundsTopTenBits) {
  const float x = std::bit_cast<float>(0x3F801000u);  // exactly half a tf32 ulp above 1
  EXPECT_EQ(tfloat32::from_float(x, RNE, IEEE).bits, 0x3F800000u);
  EXPECT_EQ(tfloat32::from_float(x, Round::nearest_away, IEEE).bits, 0x3F802000u);
}

}  // namespace
}  // namespace mixp
