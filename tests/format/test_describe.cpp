// describe.h: value parsing, how one value is stored per format, bit strings and format facts.
// Expected values are the seeds' pi example and docs/formats.md's thresholds.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "mixp/format/describe.h"

namespace mixp {
namespace {

constexpr auto RNE = Round::nearest_even;
constexpr auto IEEE = Overflow::ieee;
constexpr auto SAT = Overflow::saturate;

StoredValue d(DType t, double x, Round r = RNE, Overflow o = IEEE, uint32_t rb = 0) {
  return describe_value(t, x, r, o, rb);
}

TEST(ParseReal, AcceptsDecimalHexSpecials) {
  EXPECT_EQ(parse_real("3.14159265"), 3.14159265);
  EXPECT_EQ(parse_real("-1.5"), -1.5);
  EXPECT_EQ(parse_real("+2e3"), 2000.0);
  EXPECT_EQ(parse_real("  -.5 "), -0.5);
  EXPECT_EQ(parse_real("0x1.8p3"), 12.0);
  EXPECT_EQ(parse_real("-0x1p-24"), -std::ldexp(1.0, -24));
  EXPECT_EQ(parse_real("inf"), HUGE_VAL);
  EXPECT_EQ(parse_real("-Infinity"), -HUGE_VAL);
  EXPECT_TRUE(std::isnan(*parse_real("nan")));
  EXPECT_TRUE(std::signbit(*parse_real("-nan")));
  EXPECT_EQ(parse_real("1e999"), HUGE_VAL);  // beyond double: inf, like strtod
  EXPECT_EQ(parse_real("1e-999"), 0.0);
  // Correct rounding: the halfway case between 1 and 1+2^-52 in decimal rounds to even (1).
  EXPECT_EQ(parse_real("1.00000000000000011102230246251565404236316680908203125"), 1.0);
}

TEST(ParseReal, RejectsGarbage) {
  for (const char* s : {"", " ", "abc", "1.2.3", "1e", "--1", "+-1", "0x", "3,5", "1 2", "nanx"}) {
    EXPECT_FALSE(parse_real(s).has_value()) << s;
  }
}

TEST(Describe, PiAsInTheSeeds) {
  const double pi = 3.14159265;
  const StoredValue f32 = d(DType::fp32, pi);
  EXPECT_EQ(f32.value, static_cast<double>(static_cast<float>(pi)));
  EXPECT_EQ(f32.value, 3.1415927410125732);
  EXPECT_EQ(f32.bits, 0x40490FDBu);
  EXPECT_EQ(f32.status, ConvertStatus::inexact);
  const StoredValue b16 = d(DType::bf16, pi);
  EXPECT_EQ(b16.value, 3.140625);
  EXPECT_EQ(bits_hex(DType::bf16, b16.bits), "0x4049");
  EXPECT_EQ(bit_fields(DType::bf16, b16.bits), "0|10000000|1001001");
  const StoredValue f16 = d(DType::fp16, pi);
  EXPECT_EQ(f16.value, 3.140625);
  EXPECT_EQ(bits_hex(DType::fp16, f16.bits), "0x4248");
  EXPECT_DOUBLE_EQ(f16.abs_error, pi - 3.140625);
  EXPECT_DOUBLE_EQ(f16.rel_error, (pi - 3.140625) / pi);
  const StoredValue f64 = d(DType::fp64, pi);
  EXPECT_EQ(f64.value, pi);
  EXPECT_EQ(f64.status, ConvertStatus::exact);
  EXPECT_EQ(bits_hex(DType::fp64, f64.bits), "0x400921fb53c8d4f1");
}

TEST(Describe, Tf32ShownInFp32Layout) {
  const StoredValue t = d(DType::tf32, 3.14159265);
  EXPECT_EQ(t.value, 3.140625);
  EXPECT_EQ(bits_hex(DType::tf32, t.bits), "0x40490000");
  EXPECT_EQ(bit_fields(DType::tf32, t.bits), "0|10000000|1001001000");
}

TEST(Describe, RoundsFromTheDoubleDirectly) {
  // 1 + 2^-11 + 2^-40 rounds up in fp16; through fp32 first it would tie and round to even (1).
  const double x = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  EXPECT_EQ(d(DType::fp16, x).value, 1.0 + std::ldexp(1.0, -10));
}

TEST(Describe, OverflowUnderflowNan) {
  EXPECT_EQ(d(DType::fp16, 70000).value, HUGE_VAL);
  EXPECT_EQ(d(DType::fp16, 70000).status, ConvertStatus::overflow);
  EXPECT_EQ(d(DType::fp16, 70000).abs_error, HUGE_VAL);
  EXPECT_EQ(d(DType::fp16, 70000, RNE, SAT).value, 65504.0);
  EXPECT_TRUE(std::isnan(d(DType::fp8_e4m3, 70000).value));
  EXPECT_EQ(d(DType::fp8_e4m3, 70000).status, ConvertStatus::overflow);
  EXPECT_EQ(d(DType::fp8_e4m3, 70000, RNE, SAT).value, 448.0);
  EXPECT_EQ(d(DType::fp8_e5m2, 70000).value, HUGE_VAL);
  EXPECT_EQ(d(DType::fp4_e2m1, 70000).value, 6.0);  // no inf: always saturates
  EXPECT_EQ(d(DType::fp16, 1e-9).status, ConvertStatus::underflow);
  EXPECT_EQ(d(DType::fp16, 1e-9).rel_error, 1.0);
  EXPECT_EQ(d(DType::fp32, 1e-9).status, ConvertStatus::inexact);
  const StoredValue n = d(DType::bf16, std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(n.status, ConvertStatus::nan);
  EXPECT_TRUE(std::isnan(n.abs_error));
  EXPECT_EQ(d(DType::fp16, HUGE_VAL).status, ConvertStatus::exact);
  EXPECT_EQ(d(DType::fp16, HUGE_VAL).abs_error, 0.0);
  EXPECT_EQ(d(DType::fp32, 0.0).rel_error, 0.0);
}

TEST(Describe, NegativeValues) {
  const StoredValue b = d(DType::bf16, -3.14159265);
  EXPECT_EQ(b.value, -3.140625);
  EXPECT_EQ(b.bits, 0xC049u);
  EXPECT_GT(b.abs_error, 0.0);
  EXPECT_EQ(d(DType::int8, -3.0).bits, 0xFDu);
  EXPECT_EQ(bits_hex(DType::int4, d(DType::int4, -3.0).bits), "0xd");
  EXPECT_EQ(bit_fields(DType::int8, 0xFD), "11111101");
}

TEST(Describe, Int8AtUnitScale) {
  EXPECT_EQ(d(DType::int8, 2.5).value, 2.0);  // ties to even
  EXPECT_EQ(d(DType::int8, 3.5).value, 4.0);
  EXPECT_EQ(d(DType::int8, -2.5).value, -2.0);
  EXPECT_EQ(d(DType::int8, 2.5, Round::nearest_away).value, 3.0);
  EXPECT_EQ(d(DType::int8, -2.7, Round::toward_zero).value, -2.0);
  EXPECT_EQ(d(DType::int8, 2.5).status, ConvertStatus::inexact);
  EXPECT_EQ(d(DType::int8, 7.0).status, ConvertStatus::exact);
  EXPECT_EQ(d(DType::int8, 0.3).status, ConvertStatus::underflow);
  EXPECT_EQ(d(DType::int8, 300).value, 127.0);
  EXPECT_EQ(d(DType::int8, 300).status, ConvertStatus::overflow);
  EXPECT_EQ(d(DType::int8, -300).value, -128.0);
  EXPECT_EQ(d(DType::int8, 127.4).status, ConvertStatus::inexact);
  EXPECT_EQ(d(DType::int8, 127.6).status, ConvertStatus::overflow);
  EXPECT_EQ(d(DType::int8, std::numeric_limits<double>::quiet_NaN()).status, ConvertStatus::nan);
  EXPECT_EQ(d(DType::int8, -HUGE_VAL).value, -128.0);
  // Stochastic: 2.25 rounds up iff floor(0.25 * 2^32) + r >= 2^32.
  EXPECT_EQ(d(DType::int8, 2.25, Round::stochastic, IEEE, 0xC0000000u).value, 3.0);
  EXPECT_EQ(d(DType::int8, 2.25, Round::stochastic, IEEE, 0xBFFFFFFFu).value, 2.0);
}

TEST(Describe, Int4Range) {
  EXPECT_EQ(d(DType::int4, 7.0).status, ConvertStatus::exact);
  EXPECT_EQ(d(DType::int4, 8.0).value, 7.0);
  EXPECT_EQ(d(DType::int4, 8.0).status, ConvertStatus::overflow);
  EXPECT_EQ(d(DType::int4, -8.0).status, ConvertStatus::exact);
  EXPECT_EQ(d(DType::int4, -8.0).bits, 0x8u);
  EXPECT_EQ(d(DType::int4, -9.0).value, -8.0);
}

TEST(Describe, Nf4NearestCode) {
  EXPECT_EQ(d(DType::nf4, 1.0).bits, 15u);
  EXPECT_EQ(d(DType::nf4, 1.0).status, ConvertStatus::exact);
  EXPECT_EQ(d(DType::nf4, 0.0).bits, 7u);
  EXPECT_EQ(d(DType::nf4, -1.0).bits, 0u);
  EXPECT_EQ(d(DType::nf4, 0.5).value, 0.44070982933044434);  // 0.5 is nearer 0.4407 than 0.5626
  EXPECT_EQ(d(DType::nf4, 0.6).value, 0.5626170039176941);
  EXPECT_EQ(d(DType::nf4, 2.0).value, 1.0);
  EXPECT_EQ(d(DType::nf4, 2.0).status, ConvertStatus::overflow);
  EXPECT_EQ(d(DType::nf4, -2.0).value, -1.0);
  EXPECT_EQ(d(DType::nf4, 0.01).status, ConvertStatus::underflow);
  // A tie goes to the lower code.
  const double mid = (0.07958029955625534 + 0.16093020141124725) / 2;
  EXPECT_EQ(d(DType::nf4, mid).bits, 8u);
  EXPECT_EQ(d(DType::nf4, 0.15, Round::toward_zero).bits, 8u);
  EXPECT_EQ(d(DType::nf4, -0.15, Round::toward_zero).bits, 6u);
  EXPECT_EQ(d(DType::nf4, 0.0, Round::toward_zero).bits, 7u);
}

TEST(Describe, RejectsScaleAndBool) {
  EXPECT_FALSE(is_describable(DType::e8m0));
  EXPECT_THROW(d(DType::e8m0, 1.0), std::invalid_argument);
  EXPECT_THROW(d(DType::boolean, 1.0), std::invalid_argument);
  for (DType t : describe_default_formats()) EXPECT_TRUE(is_describable(t));
}

TEST(Describe, DefaultFormatsInRegistryOrder) {
  std::string names;
  for (DType t : describe_default_formats()) names += std::string(name(t)) + " ";
  EXPECT_EQ(names,
            "fp64 fp32 tf32 bf16 fp16 fp8_e4m3 fp8_e5m2 fp6_e2m3 fp6_e3m2 fp4_e2m1 int8 int4 nf4 ");
}

TEST(Describe, BitStrings) {
  EXPECT_EQ(bits_hex(DType::fp6_e3m2, 0x1F), "0x1f");
  EXPECT_EQ(bits_hex(DType::fp4_e2m1, 0x7), "0x7");
  EXPECT_EQ(bits_hex(DType::fp8_e4m3, 0x7E), "0x7e");
  EXPECT_EQ(bit_fields(DType::fp8_e4m3, 0x7E), "0|1111|110");
  EXPECT_EQ(bit_fields(DType::fp4_e2m1, 0x7), "0|11|1");
  EXPECT_EQ(bit_fields(DType::nf4, 0xF), "1111");
}

TEST(FormatFacts, MatchFormatsMd) {
  const FormatFacts h = format_facts(DType::fp16);
  EXPECT_EQ(h.max_finite, 65504.0);
  EXPECT_EQ(*h.min_normal, std::ldexp(1.0, -14));
  EXPECT_EQ(h.min_positive, std::ldexp(1.0, -24));
  EXPECT_EQ(*h.inf_bits, 0x7C00u);
  EXPECT_EQ(*h.nan_bits, 0x7E00u);
  EXPECT_EQ(*h.epsilon, std::ldexp(1.0, -10));
  const FormatFacts e4 = format_facts(DType::fp8_e4m3);
  EXPECT_FALSE(e4.inf_bits.has_value());
  EXPECT_EQ(*e4.nan_bits, 0x7Fu);
  EXPECT_EQ(e4.max_finite, 448.0);
  const FormatFacts f4 = format_facts(DType::fp4_e2m1);
  EXPECT_FALSE(f4.nan_bits.has_value());
  EXPECT_EQ(f4.block_size, 32);
  EXPECT_EQ(*f4.scale_dtype, DType::e8m0);
  EXPECT_EQ(*format_facts(DType::bf16).nan_bits, 0x7FC0u);
  EXPECT_EQ(*format_facts(DType::tf32).inf_bits, 0x7F800000u);
  EXPECT_EQ(*format_facts(DType::fp64).nan_bits, 0x7FF8000000000000u);
  const FormatFacts i8 = format_facts(DType::int8);
  EXPECT_FALSE(i8.exponent_bits.has_value());
  EXPECT_EQ(i8.max_finite, 127.0);
  EXPECT_EQ(format_facts(DType::nf4).block_size, 64);
  EXPECT_EQ(format_facts(DType::bf16).safetensors, "BF16");
}

}  // namespace
}  // namespace mixp
