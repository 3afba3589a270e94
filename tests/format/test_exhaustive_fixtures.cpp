// mixp's codec against independent references (tests/golden/format/, written by
// gen_format_fixtures.py): numpy for fp16, torch for bf16, and an exact-rational reference (every
// representable value as a Fraction, nearest by exact distance) for fp8, fp6, fp4 and tf32.
// Nothing here was derived from mixp's own output.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "fixture_file.h"
#include "mixp/format/minifloat.h"

namespace mixp {
namespace {

using test::f32;
using test::Fixture;

constexpr auto RNE = Round::nearest_even;
constexpr auto IEEE = Overflow::ieee;
constexpr auto SAT = Overflow::saturate;

// Collects mismatches and reports the first few, instead of thousands of EXPECT lines.
class Mismatches {
 public:
  explicit Mismatches(std::string what) : what_(std::move(what)) {}
  void check(bool ok, uint32_t input, uint32_t got, uint32_t want) {
    ++checked_;
    if (ok) return;
    if (++count_ <= 10) {
      char buf[128];
      std::snprintf(buf, sizeof buf, "\n  input 0x%08X: got 0x%X, want 0x%X", input, got, want);
      first_ += buf;
    }
  }
  ~Mismatches() {
    EXPECT_GT(checked_, 0u) << what_;
    EXPECT_EQ(count_, 0u) << what_ << ": " << count_ << " of " << checked_ << " differ" << first_;
  }

 private:
  std::string what_, first_;
  uint32_t count_ = 0, checked_ = 0;
};

bool is_f32_nan(uint32_t b) { return (b & 0x7F800000u) == 0x7F800000u && (b & 0x7FFFFFu) != 0; }

TEST(ExhaustiveNumpy, Fp16DecodeEveryPattern) {
  const Fixture fx("fp16_decode.bin");
  ASSERT_EQ(fx.count(), 65536u);
  Mismatches m("fp16 decode vs numpy"), nan_rule("fp16 NaN decode: numpy's bits plus the quiet bit");
  for (uint32_t i = 0; i < fx.count(); ++i) {
    const uint32_t p = fx.input(i), want = fx.output(i, 0);
    const uint32_t got = test::bits_of(static_cast<float>(decode_float(kFp16, p)));
    const uint32_t got_type = test::bits_of(half::from_bits(p).to_float());
    if (is_f32_nan(want)) {
      // numpy keeps a signalling NaN signalling; mixp widens NaN quiet (float_codec.cpp), with
      // the same sign and payload.
      nan_rule.check(got == (want | 0x00400000u) && got_type == got, p, got, want);
    } else {
      m.check(got == want && got_type == want, p, got, want);
    }
  }
}

TEST(ExhaustiveNumpy, Fp16EncodeRoundToNearestEven) {
  const Fixture fx("fp16_encode.bin");
  ASSERT_GT(fx.count(), 150000u);
  Mismatches ieee("fp16 encode vs numpy"), sat("fp16 saturate (numpy's inf from a finite -> max)"),
      nan("fp16 NaN: NaN with the input's sign");
  for (uint32_t i = 0; i < fx.count(); ++i) {
    const uint32_t in = fx.input(i), want = fx.output(i, 0);
    const float x = f32(in);
    const uint32_t got = encode_float(kFp16, x, RNE, IEEE, 0, nullptr);
    if (std::isnan(x)) {
      // numpy keeps payloads its own way; the exact mixp rule is tested in the thresholds file.
      nan.check((got & 0x7C00u) == 0x7C00u && (got & 0x3FFu) && (got >> 15) == (in >> 31), in,
                got, want);
      continue;
    }
    ieee.check(got == want && half::from_float(x, RNE, IEEE).bits == want, in, got, want);
    // Saturation differs from IEEE only where the result is inf (overflow or an inf input).
    const bool to_inf = (want & 0x7FFFu) == 0x7C00u;
    const uint32_t want_sat = to_inf ? ((want & 0x8000u) | 0x7BFFu) : want;
    const uint32_t got_sat = encode_float(kFp16, x, RNE, SAT, 0, nullptr);
    sat.check(got_sat == want_sat, in, got_sat, want_sat);
  }
}

TEST(ExhaustiveTorch, Bf16EncodeRoundToNearestEven) {
  const Fixture fx("bf16_encode.bin");
  ASSERT_GT(fx.count(), 150000u);
  Mismatches ieee("bf16 encode vs torch"), sat("bf16 saturate (torch's inf from a finite -> max)");
  for (uint32_t i = 0; i < fx.count(); ++i) {
    const uint32_t in = fx.input(i), want = fx.output(i, 0);
    const float x = f32(in);
    ASSERT_FALSE(std::isnan(x)) << "the generator leaves NaN out of the torch fixture";
    const uint32_t got = encode_float(kBf16, x, RNE, IEEE, 0, nullptr);
    ieee.check(got == want && bfloat16::from_float(x, RNE, IEEE).bits == want, in, got, want);
    const bool to_inf = (want & 0x7FFFu) == 0x7F80u;
    const uint32_t want_sat = to_inf ? ((want & 0x8000u) | 0x7F7Fu) : want;
    const uint32_t got_sat = encode_float(kBf16, x, RNE, SAT, 0, nullptr);
    sat.check(got_sat == want_sat, in, got_sat, want_sat);
  }
}

// The exact-rational reference. Columns: nearest-even ieee, nearest-even saturate, toward-zero
// ieee, nearest-away ieee (gen_format_fixtures.py). NaN results are compared bit for bit: the
// reference encodes docs/formats.md's NaN rule.
template <class T>
void check_reference(const char* file) {
  constexpr FloatFormat F = T::format;
  const Fixture fx(file);
  ASSERT_EQ(fx.n_out(), 4u);
  ASSERT_GT(fx.count(), 4000u);
  const struct {
    Round r;
    Overflow o;
    const char* name;
  } cols[] = {{RNE, IEEE, "nearest-even ieee"},
              {RNE, SAT, "nearest-even saturate"},
              {Round::toward_zero, IEEE, "toward-zero ieee"},
              {Round::nearest_away, IEEE, "nearest-away ieee"}};
  for (uint32_t k = 0; k < 4; ++k) {
    Mismatches m(std::string(file) + " " + cols[k].name);
    for (uint32_t i = 0; i < fx.count(); ++i) {
      const uint32_t in = fx.input(i), want = fx.output(i, k);
      const uint32_t got = encode_float(F, f32(in), cols[k].r, cols[k].o, 0, nullptr);
      const uint32_t got_type = T::from_float(f32(in), cols[k].r, cols[k].o).bits;
      m.check(got == want && got_type == want, in, got, want);
    }
  }
}

TEST(ExhaustiveReference, Fp8E4M3) { check_reference<float8_e4m3>("fp8_e4m3.bin"); }
TEST(ExhaustiveReference, Fp8E5M2) { check_reference<float8_e5m2>("fp8_e5m2.bin"); }
TEST(ExhaustiveReference, Fp6E2M3) { check_reference<float6_e2m3>("fp6_e2m3.bin"); }
TEST(ExhaustiveReference, Fp6E3M2) { check_reference<float6_e3m2>("fp6_e3m2.bin"); }
TEST(ExhaustiveReference, Fp4E2M1) { check_reference<float4_e2m1>("fp4_e2m1.bin"); }

// tf32 columns: nearest-even ieee, nearest-away ieee (PTX cvt.rna.tf32.f32), toward-zero ieee
// (what tensor cores read from an unrounded fp32), nearest-even saturate; fp32 layout.
TEST(ExhaustiveReference, Tf32) {
  const Fixture fx("tf32.bin");
  ASSERT_EQ(fx.n_out(), 4u);
  const struct {
    Round r;
    Overflow o;
    const char* name;
  } cols[] = {{RNE, IEEE, "tf32 nearest-even"},
              {Round::nearest_away, IEEE, "tf32 nearest-away (cvt.rna)"},
              {Round::toward_zero, IEEE, "tf32 toward-zero"},
              {RNE, SAT, "tf32 nearest-even saturate"}};
  for (uint32_t k = 0; k < 4; ++k) {
    Mismatches m(cols[k].name);
    for (uint32_t i = 0; i < fx.count(); ++i) {
      const uint32_t in = fx.input(i), want = fx.output(i, k);
      const uint32_t got = tfloat32::from_float(f32(in), cols[k].r, cols[k].o).bits;
      m.check(got == want && (got & 0x1FFFu) == 0, in, got, want);
    }
  }
}

}  // namespace
}  // namespace mixp
