// Self-contained exhaustive sweeps (docs/architecture.md 6.5): every bit pattern of every stored
// float format decodes and re-encodes to itself under every rounding and overflow mode, decoding is
// monotonic and sign-symmetric, and bf16 round-to-nearest-even equals docs/formats.md's integer
// formula over a strided sweep of all of fp32 plus every tie and near-tie.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <string>

#include "format/mode_names.h"
#include "mixp/format/minifloat.h"

namespace mixp {
namespace {

using namespace test::modes;

struct Case {
  const char* name;
  FloatFormat f;
};
constexpr Case kFormats[] = {{"fp16", kFp16},         {"bf16", kBf16},         {"fp8_e4m3", kFp8E4M3},
                             {"fp8_e5m2", kFp8E5M2}, {"fp6_e2m3", kFp6E2M3}, {"fp6_e3m2", kFp6E3M2},
                             {"fp4_e2m1", kFp4E2M1}, {"tf32", kTf32}};

struct Mode {
  Round r;
  Overflow o;
};
constexpr Mode kModes[] = {{RNE, IEEE},
                           {RNE, SAT},
                           {Round::toward_zero, IEEE},
                           {Round::toward_zero, SAT},
                           {Round::nearest_away, IEEE},
                           {Round::stochastic, IEEE},
                           {Round::stochastic, SAT}};

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%X", v);
  return buf;
}

// What re-encoding decode(p) must give. Finite values: p itself, exactly. inf: itself under
// Overflow::ieee, max finite with the sign under saturate. NaN: still NaN with the same sign; IEEE
// formats keep the payload and are made quiet (float_codec.h), E4M3FN has a single NaN S.1111.111.
uint32_t expected_roundtrip(const FloatFormat& f, uint32_t p, double d, Overflow o,
                            ConvertStatus* want_st) {
  const uint32_t sign = p & f.sign_mask();
  if (std::isnan(d)) {
    *want_st = ConvertStatus::nan;
    return f.specials == Specials::ieee ? (p | (1U << (f.man_bits - 1))) : p;
  }
  if (std::isinf(d) && o == SAT) {
    *want_st = ConvertStatus::overflow;
    return sign | f.max_finite_bits();
  }
  *want_st = ConvertStatus::exact;
  return p;
}

TEST(ExhaustiveRoundTrip, EveryPatternEveryMode) {
  for (const Case& c : kFormats) {
    const FloatFormat& f = c.f;
    const uint32_t n = 1U << f.bits();
    uint32_t bad = 0;
    std::string first;
    for (uint32_t p = 0; p < n; ++p) {
      const double d = decode_float(f, p);
      for (const Mode& m : kModes) {
        ConvertStatus want_st, st;
        const uint32_t want = expected_roundtrip(f, p, d, m.o, &want_st);
        // Any random bits: an exactly representable value never moves under stochastic rounding.
        const uint32_t rb = sr_bits(0xC0FFEE, p);
        const uint32_t got = encode_float(f, d, m.r, m.o, rb, &st);
        // The same through fp32 (every value here is exactly an fp32).
        const uint32_t got_f = encode_float(f, static_cast<float>(d), m.r, m.o, rb, nullptr);
        if ((got != want || got_f != want || st != want_st) && ++bad <= 8) {
          first += "\n  " + hex(p) + " mode " + std::string(to_string(m.r)) + "/" +
                   std::string(to_string(m.o)) + ": got " + hex(got) + " status " +
                   std::string(to_string(st)) + ", want " + hex(want);
        }
      }
    }
    EXPECT_EQ(bad, 0u) << c.name << first;
  }
}

// The value types go through the same codec; check each one's from_float(to_float()) too.
template <class T>
void typed_roundtrip() {
  constexpr FloatFormat F = T::format;
  for (uint32_t p = 0; p < (1U << F.bits()); ++p) {
    const T v = T::from_bits(p);
    const float x = v.to_float();
    const double d = decode_float(F, p);
    if (std::isnan(d)) {
      EXPECT_TRUE(std::isnan(x) && std::signbit(x) == std::signbit(d)) << hex(p);
      EXPECT_TRUE(v.is_nan());
      EXPECT_TRUE(T::from_float(x, RNE, SAT).is_nan()) << "NaN stays NaN under saturate";
      EXPECT_EQ(std::signbit(T::from_float(x, RNE, IEEE).to_float()), std::signbit(x));
      continue;
    }
    EXPECT_EQ(static_cast<double>(x), d) << hex(p);
    EXPECT_FALSE(v.is_nan());
    EXPECT_EQ(T::from_float(x, RNE, IEEE).bits, p) << hex(p);
  }
}

TEST(ExhaustiveRoundTrip, ValueTypes) {
  typed_roundtrip<half>();
  typed_roundtrip<bfloat16>();
  typed_roundtrip<float8_e4m3>();
  typed_roundtrip<float8_e5m2>();
  typed_roundtrip<float6_e2m3>();
  typed_roundtrip<float6_e3m2>();
  typed_roundtrip<float4_e2m1>();
}

// Positive codes in increasing order are increasing values (the property bulk min/max and the
// rounding search rely on), and flipping the sign bit negates the value.
TEST(ExhaustiveRoundTrip, DecodeIsMonotonicAndSignSymmetric) {
  for (const Case& c : kFormats) {
    const FloatFormat& f = c.f;
    double prev = -1.0;
    for (uint32_t p = 0; p < f.sign_mask(); ++p) {
      const double d = decode_float(f, p);
      const double nd = decode_float(f, p | f.sign_mask());
      if (std::isnan(d)) {
        EXPECT_TRUE(std::isnan(nd) && std::signbit(nd) && !std::signbit(d)) << c.name << hex(p);
        continue;
      }
      EXPECT_GT(d, prev) << c.name << " " << hex(p);
      EXPECT_EQ(nd, -d) << c.name << " " << hex(p);
      EXPECT_TRUE(std::signbit(nd)) << c.name << " " << hex(p);
      prev = d;
    }
  }
}

// docs/formats.md: bf16 RNE from fp32 is (u + 0x7FFF + ((u >> 16) & 1)) >> 16 after a NaN check,
// and toward zero is u >> 16. Strided over all fp32 (4093 is prime, so every low-bit residue class
// is hit) plus every high half with a low half at or next to a tie.
TEST(ExhaustiveRoundTrip, Bf16MatchesIntegerFormulaOverFp32) {
  uint32_t bad = 0, checked = 0;
  std::string first;
  auto check = [&](uint32_t u) {
    if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x7FFFFFu)) return;  // NaN: tested elsewhere
    ++checked;
    const float x = std::bit_cast<float>(u);
    const uint32_t rne = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    const uint32_t got = encode_float(kBf16, x, RNE, IEEE, 0, nullptr);
    const uint32_t got_type = bfloat16::from_float(x, RNE, IEEE).bits;
    const uint32_t got_rtz = encode_float(kBf16, x, Round::toward_zero, IEEE, 0, nullptr);
    if ((got != rne || got_type != rne || got_rtz != (u >> 16)) && ++bad <= 8) {
      first += "\n  " + hex(u) + ": got " + hex(got) + " / rtz " + hex(got_rtz) + ", want " +
               hex(rne) + " / " + hex(u >> 16);
    }
  };
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 4093) check(static_cast<uint32_t>(u));
  for (uint32_t hi = 0; hi < 0x10000u; ++hi) {
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7FFEu, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) {
      check((hi << 16) | lo);
    }
  }
  EXPECT_GT(checked, 1'400'000u);
  EXPECT_EQ(bad, 0u) << first;
}

// Encoding is sign-symmetric for every rounding but stochastic's direction: encode(-x) is
// encode(x) with the sign bit set (NaN and zero included). Strided over fp32.
TEST(ExhaustiveRoundTrip, EncodeIsSignSymmetric) {
  for (const Case& c : kFormats) {
    for (uint64_t u = 0; u < 0x80000000u; u += 65521) {
      const float x = std::bit_cast<float>(static_cast<uint32_t>(u));
      for (const Mode& m : kModes) {
        if (m.r == Round::stochastic) continue;
        const uint32_t pos = encode_float(c.f, x, m.r, m.o, 0, nullptr);
        const uint32_t neg = encode_float(c.f, -x, m.r, m.o, 0, nullptr);
        // fp6/fp4 encode NaN as +0 whatever its sign (float_codec.h).
        const bool nan_finite = std::isnan(x) && c.f.specials == Specials::finite;
        const uint32_t want = nan_finite ? pos : (pos | c.f.sign_mask());
        ASSERT_EQ(neg, want) << c.name << " " << hex(static_cast<uint32_t>(u));
      }
    }
  }
}

}  // namespace
}  // namespace mixp
