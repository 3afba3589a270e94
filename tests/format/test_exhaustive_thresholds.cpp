// The edges docs/formats.md names, checked one by one: overflow thresholds in both
// overflow modes, subnormal minimum and half-minimum ties, signed zero, infinities, NaN payloads,
// and the status every conversion reports. Expected bits are docs/formats.md's numbers.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "format/mode_names.h"
#include "mixp/format/minifloat.h"

namespace mixp {
namespace {

using namespace test::modes;

uint32_t enc(const FloatFormat& f, double x, Round r = RNE, Overflow o = IEEE) {
  return encode_float(f, x, r, o, 0, nullptr);
}
ConvertStatus status(const FloatFormat& f, double x, Round r = RNE, Overflow o = IEEE) {
  ConvertStatus st;
  encode_float(f, x, r, o, 0, &st);
  return st;
}
float up(float x) { return std::nextafter(x, HUGE_VALF); }
float down(float x) { return std::nextafter(x, 0.0f); }
float f32(uint32_t b) { return std::bit_cast<float>(b); }
const double kInf = HUGE_VAL;

TEST(Thresholds, Fp16Overflow) {
  EXPECT_EQ(enc(kFp16, 65520.0f), 0x7C00u);           // tie above max (odd mantissa) -> inf
  EXPECT_EQ(enc(kFp16, down(65520.0f)), 0x7BFFu);     // 65519.996
  EXPECT_EQ(enc(kFp16, -65520.0f), 0xFC00u);
  EXPECT_EQ(enc(kFp16, 65520.0f, RNE, SAT), 0x7BFFu);
  EXPECT_EQ(enc(kFp16, -65520.0f, RNE, SAT), 0xFBFFu);
  EXPECT_EQ(enc(kFp16, 65520.0f, RNA), 0x7C00u);
  EXPECT_EQ(enc(kFp16, 65535.0f, RTZ), 0x7BFFu);      // IEEE 754 7.4: toward zero stays finite
  EXPECT_EQ(enc(kFp16, 1e30, RTZ), 0x7BFFu);
  EXPECT_EQ(enc(kFp16, 65504.0f), 0x7BFFu);
}

TEST(Thresholds, Bf16Overflow) {
  const float max = f32(0x7F7F0000u), tie = f32(0x7F7F8000u);
  EXPECT_EQ(enc(kBf16, max), 0x7F7Fu);
  EXPECT_EQ(enc(kBf16, tie), 0x7F80u);
  EXPECT_EQ(enc(kBf16, down(tie)), 0x7F7Fu);
  EXPECT_EQ(enc(kBf16, tie, RNE, SAT), 0x7F7Fu);
  EXPECT_EQ(enc(kBf16, -std::numeric_limits<float>::max(), RTZ), 0xFF7Fu);
}

TEST(Thresholds, Fp8E4M3Overflow) {
  EXPECT_EQ(enc(kFp8E4M3, 448.0f), 0x7Eu);
  EXPECT_EQ(enc(kFp8E4M3, 464.0f), 0x7Eu);            // tie: 448's mantissa 110 is even
  EXPECT_EQ(enc(kFp8E4M3, up(464.0f)), 0x7Fu);        // non-saturating: NaN
  EXPECT_EQ(enc(kFp8E4M3, -up(464.0f)), 0xFFu);
  EXPECT_EQ(enc(kFp8E4M3, up(464.0f), RNE, SAT), 0x7Eu);
  EXPECT_EQ(enc(kFp8E4M3, -1e9, RNE, SAT), 0xFEu);
  EXPECT_EQ(enc(kFp8E4M3, 464.0f, RNA), 0x7Fu);       // ties away: past max -> NaN
  // Toward zero: a finite input stays finite (docs/formats.md; this was NaN before the fix).
  EXPECT_EQ(enc(kFp8E4M3, 479.0f, RTZ), 0x7Eu);
  EXPECT_EQ(enc(kFp8E4M3, 480.0f, RTZ), 0x7Eu);
  EXPECT_EQ(enc(kFp8E4M3, -1e9, RTZ), 0xFEu);
  EXPECT_EQ(status(kFp8E4M3, 1e9, RTZ), ConvertStatus::overflow);
  EXPECT_EQ(enc(kFp8E4M3, kInf, RTZ), 0x7Fu);         // inf is not a rounding overflow
}

TEST(Thresholds, Fp8E5M2Overflow) {
  EXPECT_EQ(enc(kFp8E5M2, 57344.0f), 0x7Bu);
  EXPECT_EQ(enc(kFp8E5M2, 61440.0f), 0x7Cu);          // tie above max (odd mantissa 11) -> inf
  EXPECT_EQ(enc(kFp8E5M2, down(61440.0f)), 0x7Bu);
  EXPECT_EQ(enc(kFp8E5M2, -61440.0f), 0xFCu);
  EXPECT_EQ(enc(kFp8E5M2, 61440.0f, RNE, SAT), 0x7Bu);
  EXPECT_EQ(enc(kFp8E5M2, -61440.0f, RNE, SAT), 0xFBu);
  EXPECT_EQ(enc(kFp8E5M2, 1e9, RTZ), 0x7Bu);
}

TEST(Thresholds, MxElementsAlwaysSaturate) {
  // No inf and no NaN in fp6/fp4: overflow clamps in both modes (docs/formats.md, MX v1.0).
  for (Overflow o : {IEEE, SAT}) {
    EXPECT_EQ(enc(kFp6E2M3, 7.5, RNE, o), 0x1Fu);
    EXPECT_EQ(enc(kFp6E2M3, 1e9, RNE, o), 0x1Fu);
    EXPECT_EQ(enc(kFp6E2M3, -kInf, RNE, o), 0x3Fu);
    EXPECT_EQ(enc(kFp6E3M2, 28.0, RNE, o), 0x1Fu);
    EXPECT_EQ(enc(kFp6E3M2, 30.0, RNE, o), 0x1Fu);
    EXPECT_EQ(enc(kFp6E3M2, -1e9, RNE, o), 0x3Fu);
    EXPECT_EQ(enc(kFp4E2M1, 6.0, RNE, o), 0x7u);
    EXPECT_EQ(enc(kFp4E2M1, 7.0, RNE, o), 0x7u);
    EXPECT_EQ(enc(kFp4E2M1, kInf, RNE, o), 0x7u);
    EXPECT_EQ(enc(kFp4E2M1, -kInf, RNE, o), 0xFu);
  }
  EXPECT_EQ(status(kFp4E2M1, 7.0), ConvertStatus::overflow);   // rounds past 6 (to 8)
  EXPECT_EQ(status(kFp4E2M1, 6.5), ConvertStatus::inexact);    // rounds to 6
}

TEST(Thresholds, InfinityInBothModes) {
  EXPECT_EQ(enc(kFp16, kInf), 0x7C00u);
  EXPECT_EQ(enc(kFp16, -kInf), 0xFC00u);
  EXPECT_EQ(enc(kFp16, kInf, RNE, SAT), 0x7BFFu);
  EXPECT_EQ(enc(kFp16, kInf, RTZ), 0x7C00u);  // an infinite input stays infinite under RTZ
  EXPECT_EQ(enc(kBf16, -kInf), 0xFF80u);
  EXPECT_EQ(enc(kBf16, -kInf, RNE, SAT), 0xFF7Fu);
  EXPECT_EQ(enc(kFp8E5M2, kInf), 0x7Cu);
  EXPECT_EQ(enc(kFp8E5M2, kInf, RNE, SAT), 0x7Bu);
  EXPECT_EQ(enc(kFp8E4M3, kInf), 0x7Fu);  // E4M3FN has no inf: NaN
  EXPECT_EQ(enc(kFp8E4M3, -kInf, RNE, SAT), 0xFEu);
  EXPECT_EQ(status(kFp16, kInf), ConvertStatus::exact);
  EXPECT_EQ(status(kFp16, kInf, RNE, SAT), ConvertStatus::overflow);
  EXPECT_EQ(status(kFp8E4M3, kInf), ConvertStatus::overflow);
}

TEST(Thresholds, SubnormalMinAndHalfMinTies) {
  struct {
    const char* name;
    FloatFormat f;
    int min_sub_exp;
  } cases[] = {{"fp16", kFp16, -24},    {"bf16", kBf16, -133},    {"fp8_e4m3", kFp8E4M3, -9},
               {"fp8_e5m2", kFp8E5M2, -16}, {"fp6_e2m3", kFp6E2M3, -3}, {"fp6_e3m2", kFp6E3M2, -4},
               {"fp4_e2m1", kFp4E2M1, -1}, {"tf32", kTf32, -136}};
  for (const auto& c : cases) {
    const double s = std::ldexp(1.0, c.min_sub_exp);
    const uint32_t neg = c.f.sign_mask();
    EXPECT_EQ(enc(c.f, s), 1u) << c.name;
    EXPECT_EQ(decode_float(c.f, 1), s) << c.name;
    EXPECT_EQ(enc(c.f, s / 2), 0u) << c.name << ": half the min subnormal ties to even (zero)";
    EXPECT_EQ(enc(c.f, -s / 2), neg) << c.name << ": underflow keeps the sign";
    EXPECT_EQ(enc(c.f, s / 2, RNA), 1u) << c.name;
    EXPECT_EQ(enc(c.f, s * 0.5000001), 1u) << c.name;
    EXPECT_EQ(enc(c.f, s * 0.4999999), 0u) << c.name;
    EXPECT_EQ(enc(c.f, s * 1.5), 2u) << c.name << ": 1.5 ulp ties to even (2)";
    EXPECT_EQ(enc(c.f, s * 2.5), 2u) << c.name << ": 2.5 ulp ties to even (2)";
    EXPECT_EQ(enc(c.f, s * 0.99, RTZ), 0u) << c.name;
    EXPECT_EQ(status(c.f, s / 2), ConvertStatus::underflow) << c.name;
    EXPECT_EQ(status(c.f, s * 1.5), ConvertStatus::inexact) << c.name;
    EXPECT_EQ(status(c.f, -s), ConvertStatus::exact) << c.name;
    // The largest subnormal plus half an ulp carries into the smallest normal (code 1 << M).
    const uint32_t max_sub = (1U << c.f.man_bits) - 1;
    EXPECT_EQ(enc(c.f, (max_sub + 0.5) * s), 1U << c.f.man_bits) << c.name;
    EXPECT_EQ(enc(c.f, (max_sub + 0.5) * s, RTZ), max_sub) << c.name;
  }
}

TEST(Thresholds, NegativeZero) {
  for (const FloatFormat& f : {kFp16, kBf16, kTf32, kFp8E4M3, kFp8E5M2, kFp6E2M3, kFp6E3M2,
                               kFp4E2M1}) {
    for (Round r : {RNE, RTZ, RNA, Round::stochastic}) {
      for (Overflow o : {IEEE, SAT}) {
        ConvertStatus st;
        EXPECT_EQ(encode_float(f, -0.0, r, o, 0xFFFFFFFFu, &st), f.sign_mask());
        EXPECT_EQ(st, ConvertStatus::exact);
        EXPECT_EQ(encode_float(f, 0.0, r, o, 0xFFFFFFFFu, &st), 0u);
      }
    }
    const double nz = decode_float(f, f.sign_mask());
    EXPECT_EQ(nz, 0.0);
    EXPECT_TRUE(std::signbit(nz));
  }
  EXPECT_EQ(std::bit_cast<uint32_t>(tfloat32::from_float(-0.0f, RNE, IEEE).to_float()),
            0x80000000u);
}

TEST(NanPayload, Fp32ToFp16) {
  // Sign kept, quiet bit (0x200) set, top 10 payload bits kept (float_codec.h, docs/formats.md).
  EXPECT_EQ(enc(kFp16, f32(0x7FC00000u)), 0x7E00u);
  EXPECT_EQ(enc(kFp16, f32(0xFFC00000u)), 0xFE00u);
  EXPECT_EQ(enc(kFp16, f32(0x7F800001u)), 0x7E00u);  // payload only below fp16's reach
  EXPECT_EQ(enc(kFp16, f32(0x7FA00000u)), 0x7F00u);  // signalling, payload bit 21 -> bit 8
  EXPECT_EQ(enc(kFp16, f32(0x7F802000u)), 0x7E01u);  // lowest payload bit that fits
  EXPECT_EQ(enc(kFp16, f32(0xFFFFFFFFu)), 0xFFFFu);
  EXPECT_EQ(enc(kFp16, f32(0xFFFFFFFFu), RNE, SAT), 0xFFFFu);  // NaN stays NaN when saturating
  EXPECT_EQ(enc(kFp16, f32(0x7FFFF000u), RTZ), 0x7FFFu);
}

TEST(NanPayload, Fp32ToBf16) {
  EXPECT_EQ(enc(kBf16, f32(0x7FC00000u)), 0x7FC0u);
  EXPECT_EQ(enc(kBf16, f32(0xFFC00000u)), 0xFFC0u);  // PyTorch drops this sign; mixp keeps it
  EXPECT_EQ(enc(kBf16, f32(0x7F810000u)), 0x7FC1u);
  EXPECT_EQ(enc(kBf16, f32(0xFF800001u)), 0xFFC0u);  // not inf: the NaN check comes first
  EXPECT_EQ(enc(kBf16, f32(0x7FFFFFFFu)), 0x7FFFu);  // payload is not rounded (no carry to sign)
  EXPECT_EQ(enc(kBf16, f32(0x7FFF8000u), RNE, SAT), 0x7FFFu);
}

TEST(NanPayload, Fp32ToFp8AndSmaller) {
  // E5M2: quiet bit is 0x02, the one remaining payload bit is fp32's bit 21.
  EXPECT_EQ(enc(kFp8E5M2, f32(0x7FC00000u)), 0x7Eu);
  EXPECT_EQ(enc(kFp8E5M2, f32(0xFFC00000u)), 0xFEu);
  EXPECT_EQ(enc(kFp8E5M2, f32(0x7FA00000u)), 0x7Fu);
  EXPECT_EQ(enc(kFp8E5M2, f32(0xFF800001u), RNE, SAT), 0xFEu);
  // E4M3FN: the one NaN per sign, S.1111.111, in both modes.
  for (Overflow o : {IEEE, SAT}) {
    EXPECT_EQ(enc(kFp8E4M3, f32(0x7FC00000u), RNE, o), 0x7Fu);
    EXPECT_EQ(enc(kFp8E4M3, f32(0xFFA00001u), RNE, o), 0xFFu);
  }
  // tf32 keeps fp32's top 10 payload bits.
  EXPECT_EQ(tfloat32::from_float(f32(0xFFC02000u), RNE, IEEE).bits, 0xFFC02000u);
  EXPECT_EQ(tfloat32::from_float(f32(0x7F801FFFu), RNE, IEEE).bits, 0x7FC00000u);
  // fp6 / fp4 have no NaN: +0 with status nan (the MX block marks NaN through its scale).
  for (const FloatFormat& f : {kFp6E2M3, kFp6E3M2, kFp4E2M1}) {
    EXPECT_EQ(enc(f, -std::numeric_limits<double>::quiet_NaN()), 0u);
    EXPECT_EQ(status(f, std::numeric_limits<double>::quiet_NaN(), RNE, SAT), ConvertStatus::nan);
  }
}

TEST(NanPayload, DecodeNanEncodings) {
  // E4M3FN: only S.1111.111 is NaN; S.1111.110 is 448 and there is no inf.
  for (uint32_t p = 0; p < 256; ++p) {
    const bool nan = (p & 0x7F) == 0x7F;
    EXPECT_EQ(std::isnan(decode_float(kFp8E4M3, p)), nan) << p;
    EXPECT_FALSE(std::isinf(decode_float(kFp8E4M3, p))) << p;
  }
  EXPECT_EQ(decode_float(kFp8E4M3, 0xFE), -448.0);
  // E5M2: S.11111.00 is inf, S.11111.{01,10,11} NaN.
  EXPECT_EQ(decode_float(kFp8E5M2, 0x7C), HUGE_VAL);
  EXPECT_EQ(decode_float(kFp8E5M2, 0xFC), -HUGE_VAL);
  for (uint32_t p : {0x7Du, 0x7Eu, 0x7Fu, 0xFDu, 0xFEu, 0xFFu}) {
    const double d = decode_float(kFp8E5M2, p);
    EXPECT_TRUE(std::isnan(d)) << p;
    EXPECT_EQ(std::signbit(d), (p & 0x80) != 0) << p;
  }
  // Widening keeps the sign and payload and makes the NaN quiet.
  EXPECT_EQ(std::bit_cast<uint64_t>(decode_float(kFp16, 0xFC01)), 0xFFF8040000000000ull);
  // fp6 / fp4: every pattern is a number.
  for (uint32_t p = 0; p < 64; ++p) {
    EXPECT_TRUE(std::isfinite(decode_float(kFp6E2M3, p)));
    EXPECT_TRUE(std::isfinite(decode_float(kFp6E3M2, p)));
  }
}

TEST(Status, CraftedInputs) {
  EXPECT_EQ(status(kFp16, 1.0), ConvertStatus::exact);
  EXPECT_EQ(status(kFp16, 65504.0, RNE, SAT), ConvertStatus::exact);
  EXPECT_EQ(status(kFp16, 1.0 + std::ldexp(1.0, -11)), ConvertStatus::inexact);  // tie, down
  EXPECT_EQ(status(kFp16, 1.0 + std::ldexp(1.0, -12), RTZ), ConvertStatus::inexact);
  EXPECT_EQ(status(kFp16, 1e6), ConvertStatus::overflow);
  EXPECT_EQ(status(kFp16, 1e6, RNE, SAT), ConvertStatus::overflow);
  EXPECT_EQ(status(kFp16, -1e6, RTZ), ConvertStatus::overflow);
  EXPECT_EQ(status(kFp16, 1e-30), ConvertStatus::underflow);
  EXPECT_EQ(status(kFp16, -1e-30), ConvertStatus::underflow);
  EXPECT_EQ(status(kFp16, std::ldexp(1.0, -24) * 3 / 4), ConvertStatus::inexact);  // -> min sub
  EXPECT_EQ(status(kFp16, std::numeric_limits<double>::quiet_NaN()), ConvertStatus::nan);
  EXPECT_EQ(status(kFp8E4M3, 470.0), ConvertStatus::overflow);
  EXPECT_EQ(status(kFp8E4M3, 464.0), ConvertStatus::inexact);  // rounds down to 448
  EXPECT_EQ(status(kFp8E5M2, 61439.0), ConvertStatus::inexact);
  EXPECT_EQ(status(kFp8E5M2, 61440.0), ConvertStatus::overflow);
  EXPECT_EQ(status(kBf16, 3.14159265), ConvertStatus::inexact);
  EXPECT_EQ(status(kBf16, 1e-45), ConvertStatus::underflow);  // below half of 2^-133
  EXPECT_EQ(status(kFp4E2M1, 0.2), ConvertStatus::underflow);
  EXPECT_EQ(status(kFp4E2M1, 0.3), ConvertStatus::inexact);   // -> 0.5
  // Stochastic rounding that lands on zero is underflow too, and an SR overflow is overflow.
  ConvertStatus st;
  encode_float(kFp16, std::ldexp(1.0, -26), Round::stochastic, IEEE, 0, &st);
  EXPECT_EQ(st, ConvertStatus::underflow);
  EXPECT_EQ(encode_float(kFp16, 65505.0, Round::stochastic, IEEE, 0xFFFFFFFFu, &st), 0x7C00u);
  EXPECT_EQ(st, ConvertStatus::overflow);
  EXPECT_EQ(encode_float(kFp16, 65505.0, Round::stochastic, SAT, 0xFFFFFFFFu, &st), 0x7BFFu);
  EXPECT_EQ(st, ConvertStatus::overflow);
}

}  // namespace
}  // namespace mixp
