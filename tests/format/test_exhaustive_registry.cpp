// The dtype registry against the numbers of docs/formats.md (literal, not recomputed), its
// agreement with the codec, name lookup, safetensors names, and the two formats outside the
// minifloat template: e8m0 (MX block scale) and tfloat32.
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <stdexcept>
#include <string>

#include "format/mode_names.h"
#include "mixp/format/minifloat.h"

namespace mixp {
namespace {

using namespace test::modes;

struct Expected {
  DType t;
  int bits, exp_bits, man_bits, bias;
  double max_finite, min_normal, min_subnormal;
  bool has_inf, has_nan;
};

// docs/formats.md: fp16 65504 / 2^-14 / 2^-24; bf16 max 0x7F7F; E4M3 448 / 2^-6 / 2^-9, no inf;
// E5M2 57344 / 2^-14 / 2^-16; E2M3 max 7.5, E3M2 28, E2M1 6, no inf/NaN; TF32 1-8-10.
const Expected kExpected[] = {
    {DType::fp64, 64, 11, 52, 1023, DBL_MAX, DBL_MIN, 0x1p-1074, true, true},
    {DType::fp32, 32, 8, 23, 127, FLT_MAX, FLT_MIN, 0x1p-149, true, true},
    {DType::tf32, 32, 8, 10, 127, 0x1.ffcp127, 0x1p-126, 0x1p-136, true, true},
    {DType::bf16, 16, 8, 7, 127, 3.3895313892515355e38, 0x1p-126, 0x1p-133, true, true},
    {DType::fp16, 16, 5, 10, 15, 65504.0, 0x1p-14, 0x1p-24, true, true},
    {DType::fp8_e4m3, 8, 4, 3, 7, 448.0, 0x1p-6, 0x1p-9, false, true},
    {DType::fp8_e5m2, 8, 5, 2, 15, 57344.0, 0x1p-14, 0x1p-16, true, true},
    {DType::fp6_e2m3, 6, 2, 3, 1, 7.5, 1.0, 0.125, false, false},
    {DType::fp6_e3m2, 6, 3, 2, 3, 28.0, 0.25, 0.0625, false, false},
    {DType::fp4_e2m1, 4, 2, 1, 1, 6.0, 1.0, 0.5, false, false},
};

TEST(Registry, FloatTraitsMatchFormatsMd) {
  for (const Expected& e : kExpected) {
    const DTypeTraits& t = traits(e.t);
    SCOPED_TRACE(std::string(t.name));
    EXPECT_EQ(t.id, e.t);
    EXPECT_TRUE(t.is_float());
    EXPECT_EQ(t.bits, e.bits);
    EXPECT_EQ(t.exp_bits, e.exp_bits);
    EXPECT_EQ(t.man_bits, e.man_bits);
    EXPECT_EQ(t.bias, e.bias);
    EXPECT_EQ(t.max_finite, e.max_finite);
    EXPECT_EQ(t.min_normal, e.min_normal);
    EXPECT_EQ(t.min_subnormal, e.min_subnormal);
    EXPECT_EQ(t.has_inf(), e.has_inf);
    EXPECT_EQ(t.has_nan(), e.has_nan);
    EXPECT_EQ(t.epsilon(), std::ldexp(1.0, -e.man_bits));
    EXPECT_NEAR(t.decimal_digits(), (e.man_bits + 1) * std::log10(2.0), 1e-12);
  }
  EXPECT_EQ(traits(DType::bf16).max_finite, static_cast<double>(std::bit_cast<float>(0x7F7F0000u)));
}

// The traits table and the codec must describe the same format: the max/min codes decode to the
// traits' numbers, and float_format() is the codec's constant.
TEST(Registry, TraitsAgreeWithCodec) {
  const struct {
    DType t;
    FloatFormat f;
  } pairs[] = {{DType::fp32, kFp32},         {DType::tf32, kTf32},         {DType::bf16, kBf16},
               {DType::fp16, kFp16},         {DType::fp8_e4m3, kFp8E4M3}, {DType::fp8_e5m2, kFp8E5M2},
               {DType::fp6_e2m3, kFp6E2M3}, {DType::fp6_e3m2, kFp6E3M2}, {DType::fp4_e2m1, kFp4E2M1}};
  for (const auto& p : pairs) {
    const DTypeTraits& t = traits(p.t);
    SCOPED_TRACE(std::string(t.name));
    const FloatFormat f = t.float_format();
    EXPECT_EQ(f.exp_bits, p.f.exp_bits);
    EXPECT_EQ(f.man_bits, p.f.man_bits);
    EXPECT_EQ(f.bias, p.f.bias);
    EXPECT_EQ(f.specials, p.f.specials);
    EXPECT_EQ(decode_float(f, f.max_finite_bits()), t.max_finite);
    EXPECT_EQ(decode_float(f, 1U << f.man_bits), t.min_normal);
    EXPECT_EQ(decode_float(f, 1), t.min_subnormal);
    if (p.t != DType::tf32) {
      EXPECT_EQ(f.bits(), t.bits);  // tf32 is 19 bits stored in 32
    }
  }
  EXPECT_EQ(kFp16.max_finite_bits(), 0x7BFFu);
  EXPECT_EQ(kBf16.max_finite_bits(), 0x7F7Fu);
  EXPECT_EQ(kFp8E4M3.max_finite_bits(), 0x7Eu);
  EXPECT_EQ(kFp8E5M2.max_finite_bits(), 0x7Bu);
  EXPECT_EQ(kFp4E2M1.max_finite_bits(), 0x7u);
}

TEST(Registry, NonFloatTraits) {
  const DTypeTraits& sc = traits(DType::e8m0);
  EXPECT_EQ(sc.kind, DKind::scale);
  EXPECT_FALSE(sc.is_signed);
  EXPECT_FALSE(sc.has_inf());
  EXPECT_TRUE(sc.has_nan());  // 0xFF
  EXPECT_EQ(sc.max_finite, 0x1p127);
  EXPECT_EQ(sc.min_subnormal, 0x1p-127);
  EXPECT_EQ(traits(DType::int8).max_finite, 127.0);
  EXPECT_EQ(traits(DType::uint8).max_finite, 255.0);
  EXPECT_EQ(traits(DType::int4).max_finite, 7.0);
  EXPECT_FALSE(traits(DType::int8).has_nan());
  EXPECT_EQ(traits(DType::nf4).kind, DKind::codebook);
  // Block formats: MX elements share an e8m0 scale per 32 (MX v1.0); int4/nf4 blocks of 64.
  for (DType t : {DType::fp6_e2m3, DType::fp6_e3m2, DType::fp4_e2m1}) {
    EXPECT_EQ(traits(t).block_size, 32);
    EXPECT_EQ(traits(t).scale_dtype, DType::e8m0);
  }
  EXPECT_EQ(traits(DType::int4).block_size, 64);
  EXPECT_EQ(traits(DType::nf4).block_size, 64);
  EXPECT_EQ(traits(DType::fp8_e4m3).block_size, 0);
  EXPECT_EQ(traits(DType::fp16).storage_bytes, 2);
  EXPECT_EQ(traits(DType::fp4_e2m1).storage_bytes, 1);
  EXPECT_EQ(traits(DType::fp64).storage_bytes, 8);
  EXPECT_EQ(traits(DType::tf32).storage_bytes, 4);
}

TEST(Registry, TableIsIndexedByEnum) {
  ASSERT_EQ(all_dtypes().size(), static_cast<size_t>(kNumDTypes));
  for (size_t i = 0; i < all_dtypes().size(); ++i) {
    EXPECT_EQ(static_cast<size_t>(all_dtypes()[i].id), i);
    EXPECT_EQ(&traits(all_dtypes()[i].id), &all_dtypes()[i]);
  }
  EXPECT_EQ(dtype_of_v<half>, DType::fp16);
  EXPECT_EQ(dtype_of_v<bfloat16>, DType::bf16);
  EXPECT_EQ(dtype_of_v<float8_e4m3>, DType::fp8_e4m3);
  EXPECT_EQ(dtype_of_v<float8_e5m2>, DType::fp8_e5m2);
  EXPECT_EQ(dtype_of_v<float4_e2m1>, DType::fp4_e2m1);
  EXPECT_EQ(dtype_of_v<tfloat32>, DType::tf32);
  EXPECT_EQ(dtype_of_v<e8m0>, DType::e8m0);
  EXPECT_EQ(dtype_of_v<float>, DType::fp32);
  EXPECT_EQ(dtype_of_v<int8_t>, DType::int8);
}

TEST(Registry, NamesAndAliases) {
  // docs/architecture.md 4.3's registry names, all present and unique.
  for (const char* n : {"fp64", "fp32", "tf32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "fp6_e2m3",
                        "fp6_e3m2", "fp4_e2m1", "int8", "int4", "nf4", "e8m0", "uint8", "int32",
                        "bool"}) {
    const auto t = find_dtype(n);
    ASSERT_TRUE(t.has_value()) << n;
    EXPECT_EQ(name(*t), n);
  }
  for (const auto& t : all_dtypes()) EXPECT_EQ(find_dtype(t.name), t.id) << t.name;
  const struct {
    const char* alias;
    DType t;
  } aliases[] = {{"float32", DType::fp32},  {"float", DType::fp32},       {"double", DType::fp64},
                 {"half", DType::fp16},     {"float16", DType::fp16},     {"bfloat16", DType::bf16},
                 {"tfloat32", DType::tf32}, {"e4m3", DType::fp8_e4m3},    {"e5m2", DType::fp8_e5m2},
                 {"float8_e4m3fn", DType::fp8_e4m3}, {"fp4", DType::fp4_e2m1}};
  for (const auto& a : aliases) EXPECT_EQ(find_dtype(a.alias), a.t) << a.alias;
  for (const char* bad : {"", "fp7", "FP16", "bf16 ", "float8"}) {
    EXPECT_FALSE(find_dtype(bad).has_value()) << "'" << bad << "'";
  }
  EXPECT_EQ(parse_dtype("half"), DType::fp16);
}

TEST(Registry, ParseErrorListsKnownNames) {
  try {
    parse_dtype("fp7");
    FAIL() << "parse_dtype must throw for an unknown name";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("fp7"), std::string::npos) << msg;
    for (const auto& t : all_dtypes()) {
      EXPECT_NE(msg.find(std::string(t.name)), std::string::npos) << t.name << " in: " << msg;
    }
  }
  const std::string floats = dtype_names(true);
  EXPECT_NE(floats.find("fp8_e4m3"), std::string::npos);
  EXPECT_EQ(floats.find("int8"), std::string::npos);
  EXPECT_EQ(floats.find("nf4"), std::string::npos);
}

TEST(Registry, SafetensorsNames) {
  // docs/architecture.md 4.3: F64 F32 BF16 F16 F8_E4M3 F8_E5M2 I8 U8 (plus I32/I64/BOOL).
  const struct {
    const char* s;
    DType t;
  } known[] = {{"F64", DType::fp64},         {"F32", DType::fp32},        {"BF16", DType::bf16},
               {"F16", DType::fp16},         {"F8_E4M3", DType::fp8_e4m3}, {"F8_E5M2", DType::fp8_e5m2},
               {"I8", DType::int8},          {"U8", DType::uint8},        {"I32", DType::int32},
               {"I64", DType::int64},        {"BOOL", DType::boolean}};
  for (const auto& k : known) {
    EXPECT_EQ(dtype_from_safetensors(k.s), k.t) << k.s;
    EXPECT_EQ(traits(k.t).safetensors, k.s);
  }
  for (const char* bad : {"", "f16", "F8_E4M3FNUZ", "TF32", "U4"}) {
    EXPECT_FALSE(dtype_from_safetensors(bad).has_value()) << "'" << bad << "'";
  }
}

TEST(E8M0, FromExponentClampsAndNeverMakesNaN) {
  EXPECT_EQ(e8m0::from_exponent(0).bits, 127);
  EXPECT_EQ(e8m0::from_exponent(-127).bits, 0);
  EXPECT_EQ(e8m0::from_exponent(127).bits, 254);
  EXPECT_EQ(e8m0::from_exponent(-1000).bits, 0);   // clamped to [-127, 127] (MX v1.0)
  EXPECT_EQ(e8m0::from_exponent(128).bits, 254);   // never 0xFF, which is NaN
  EXPECT_EQ(e8m0::from_exponent(1000).bits, 254);
  for (int e = -127; e <= 127; ++e) {
    const e8m0 s = e8m0::from_exponent(e);
    EXPECT_EQ(s.exponent(), e);
    EXPECT_FALSE(s.is_nan());
  }
}

TEST(E8M0, EveryPatternToFloat) {
  for (uint32_t b = 0; b < 255; ++b) {
    const e8m0 s{static_cast<uint8_t>(b)};
    EXPECT_EQ(s.to_float(), std::ldexp(1.0f, static_cast<int>(b) - 127)) << b;  // 2^(E-127)
    EXPECT_GT(s.to_float(), 0.0f) << "no zero in e8m0";
  }
  EXPECT_EQ(e8m0{0}.to_float(), 0x1p-127f);  // an fp32 subnormal, exactly
  EXPECT_EQ(e8m0{254}.to_float(), 0x1p127f);
  const e8m0 nan{0xFF};
  EXPECT_TRUE(nan.is_nan());
  EXPECT_TRUE(std::isnan(nan.to_float()));
  EXPECT_EQ(e8m0::kNaN, 0xFF);
}

TEST(Tfloat32, RoundingModes) {
  const auto tf = [](uint32_t u, Round r, Overflow o = IEEE) {
    return tfloat32::from_float(std::bit_cast<float>(u), r, o).bits;
  };
  // tf32 keeps 10 mantissa bits: its ulp is 0x2000 in fp32 bits, half an ulp 0x1000.
  EXPECT_EQ(tf(0x3F801000u, RNE), 0x3F800000u);  // tie, even below
  EXPECT_EQ(tf(0x3F803000u, RNE), 0x3F804000u);  // tie, even above
  EXPECT_EQ(tf(0x3F801000u, Round::nearest_away), 0x3F802000u);  // cvt.rna: ties away
  EXPECT_EQ(tf(0xBF801000u, Round::nearest_away), 0xBF802000u);
  EXPECT_EQ(tf(0x3F800FFFu, Round::nearest_away), 0x3F800000u);
  EXPECT_EQ(tf(0x3F801FFFu, Round::toward_zero), 0x3F800000u);  // what tensor cores read
  EXPECT_EQ(tf(0xBF801FFFu, Round::toward_zero), 0xBF800000u);
  EXPECT_EQ(tf(0x3F801001u, RNE), 0x3F802000u);
  EXPECT_EQ(tf(0x3FFFF000u, RNE), 0x40000000u);  // carry into the exponent
  EXPECT_EQ(tf(0x00001000u, RNE), 0x00000000u);  // half the min subnormal: even (zero)
  EXPECT_EQ(tf(0x00003000u, RNE), 0x00004000u);
  // Overflow: the max finite tf32 is 0x7F7FE000; the tie above it has an odd mantissa below.
  EXPECT_EQ(tf(0x7F7FF000u, RNE), 0x7F800000u);
  EXPECT_EQ(tf(0x7F7FEFFFu, RNE), 0x7F7FE000u);
  EXPECT_EQ(tf(0x7F7FF000u, Round::nearest_away), 0x7F800000u);
  EXPECT_EQ(tf(0x7F7FFFFFu, Round::toward_zero), 0x7F7FE000u);
  EXPECT_EQ(tf(0x7F7FF000u, RNE, SAT), 0x7F7FE000u);
  EXPECT_EQ(tf(0xFF800000u, RNE), 0xFF800000u);
  EXPECT_EQ(tf(0xFF800000u, RNE, SAT), 0xFF7FE000u);
  EXPECT_EQ(tfloat32{0x3F802000u}.to_float(), 1.0f + 0x1p-10f);
  ConvertStatus st;
  tfloat32::from_float(1.0f + 0x1p-10f, RNE, IEEE, 0, &st);
  EXPECT_EQ(st, ConvertStatus::exact);
  tfloat32::from_float(1.0f + 0x1p-11f, RNE, IEEE, 0, &st);
  EXPECT_EQ(st, ConvertStatus::inexact);
}

TEST(RoundingNames, RoundTripAndErrors) {
  for (Round r : {RNE, Round::toward_zero, Round::stochastic, Round::nearest_away}) {
    EXPECT_EQ(parse_round(to_string(r)), r);
  }
  EXPECT_EQ(parse_round("nearest_even"), RNE);
  EXPECT_EQ(parse_round("rna"), Round::nearest_away);
  EXPECT_THROW(parse_round("up"), std::invalid_argument);
  EXPECT_EQ(to_string(ConvertStatus::underflow), "underflow");
  EXPECT_EQ(to_string(SAT), "saturate");
}

}  // namespace
}  // namespace mixp
