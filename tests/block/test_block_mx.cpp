// OCP MX block formats: shared-exponent choice on crafted blocks, exact decoding of every code,
// bit-exact agreement with an independent brute-force quantizer, packing layout, stochastic
// rounding and error messages. Expected values are worked out by hand from OCP MX v1.0 6.3 and
// docs/formats.md (the comments show the arithmetic).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "mixp/format/block_mx.h"

namespace mixp {
namespace {

constexpr MxElement kAll[] = {MxElement::fp8_e4m3, MxElement::fp8_e5m2, MxElement::fp6_e2m3,
                              MxElement::fp6_e3m2, MxElement::fp4_e2m1, MxElement::int8};
const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

int scale_exp(const std::vector<float>& block, MxElement e) {
  return mx_shared_scale(block, e).exponent();
}

std::vector<float> fake(std::vector<float> x, MxElement e, int64_t row_len = -1, int block = 32) {
  MxOptions o;
  o.block_size = block;
  mx_fake_quantize(x, row_len < 0 ? static_cast<int64_t>(x.size()) : row_len, e, o);
  return x;
}

// ---- independent reference: element values from the bit fields, nearest by brute force ----

struct Fields {
  int E, M, bias;
};
Fields fields_of(MxElement e) {
  switch (e) {
    case MxElement::fp8_e4m3:
      return {4, 3, 7};
    case MxElement::fp8_e5m2:
      return {5, 2, 15};
    case MxElement::fp6_e2m3:
      return {2, 3, 1};
    case MxElement::fp6_e3m2:
      return {3, 2, 3};
    case MxElement::fp4_e2m1:
      return {2, 1, 1};
    default:
      return {0, 0, 0};
  }
}

// Value of a code, or NaN/inf for the special codes. Written from the OCP tables, not the codec.
double ref_value(MxElement e, uint32_t c) {
  if (e == MxElement::int8) return static_cast<int8_t>(c) / 64.0;
  const Fields f = fields_of(e);
  const bool neg = (c >> (f.E + f.M)) & 1;
  const uint32_t ex = (c >> f.M) & ((1u << f.E) - 1);
  const uint32_t m = c & ((1u << f.M) - 1);
  if (e == MxElement::fp8_e4m3 && ex == 15 && m == 7) return std::nan("");
  if (e == MxElement::fp8_e5m2 && ex == 31)
    return m == 0 ? (neg ? -HUGE_VAL : HUGE_VAL) : std::nan("");
  const double v = ex == 0 ? std::ldexp(m, 1 - f.bias - f.M)
                           : std::ldexp(1.0 + std::ldexp(m, -f.M), static_cast<int>(ex) - f.bias);
  return neg ? -v : v;
}

uint32_t num_codes(MxElement e) {
  return 1u << mx_info(e).bits;
}

// Nearest finite code value to `scaled`, saturating, ties to the even code; same sign as scaled.
double ref_round(MxElement e, double scaled) {
  if (e == MxElement::int8) {
    double best = 0, bd = HUGE_VAL;
    for (int q = -127; q <= 127; ++q) {
      const double d = std::fabs(q / 64.0 - scaled);
      if (d < bd || (d == bd && q % 2 == 0)) {
        bd = d;
        best = q / 64.0;
      }
    }
    return best;
  }
  const Fields f = fields_of(e);
  const uint32_t sign = std::signbit(scaled) ? 1u << (f.E + f.M) : 0;
  double best = 0, bd = HUGE_VAL;
  uint32_t bc = 0;
  for (uint32_t c = 0; c < num_codes(e) / 2; ++c) {
    const double v = ref_value(e, c | sign);
    if (!std::isfinite(v)) continue;
    const double d = std::fabs(v - scaled);
    if (d < bd || (d == bd && (c & 1) == 0 && (bc & 1) == 1)) {
      bd = d;
      best = v;
      bc = c;
    }
  }
  return best;
}

std::vector<float> ref_fake(const std::vector<float>& x, MxElement e, int64_t row_len, int block) {
  std::vector<float> y(x.size());
  for (size_t r = 0; r < x.size(); r += row_len) {
    for (int64_t j = 0; j < row_len; j += block) {
      const size_t b = r + j, len = std::min<int64_t>(block, row_len - j);
      double amax = 0;
      bool special = false;
      for (size_t k = b; k < b + len; ++k) {
        special |= !std::isfinite(x[k]);
        amax = std::max(amax, std::fabs(static_cast<double>(x[k])));
      }
      int lg = -126;
      if (amax > 0) {
        std::frexp(amax, &lg);
        lg -= 1;
      }
      const int shared = std::clamp(lg - mx_info(e).emax, -127, 127);
      for (size_t k = b; k < b + len; ++k) {
        y[k] =
            special
                ? kNaN
                : static_cast<float>(std::ldexp(ref_round(e, std::ldexp(x[k], -shared)), shared));
      }
    }
  }
  return y;
}

bool same_bits(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) ||
         std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

// ---------------------------------- shared exponent ----------------------------------

TEST(MxScale, PowerOfTwoAmax) {
  // amax 4 = 2^2: shared = 2 - emax.
  const std::vector<float> b = {4.0f, 1.0f, -0.25f};
  EXPECT_EQ(scale_exp(b, MxElement::fp4_e2m1), 0);    // 2 - 2
  EXPECT_EQ(scale_exp(b, MxElement::fp8_e4m3), -6);   // 2 - 8
  EXPECT_EQ(scale_exp(b, MxElement::fp8_e5m2), -13);  // 2 - 15
  EXPECT_EQ(scale_exp(b, MxElement::fp6_e2m3), 0);
  EXPECT_EQ(scale_exp(b, MxElement::fp6_e3m2), -2);  // 2 - 4
  EXPECT_EQ(scale_exp(b, MxElement::int8), 2);       // 2 - 0
  EXPECT_EQ(mx_shared_scale(b, MxElement::fp8_e4m3).bits, 127 - 6);
  // The negative element can be the amax too.
  EXPECT_EQ(scale_exp({1.0f, -4.0f}, MxElement::fp4_e2m1), 0);
}

TEST(MxScale, JustBelowPowerOfTwoUsesTheLowerExponent) {
  // 4 - ulp: floor(log2) = 1, not 2 (a float log2 rounds this to exactly 2.0).
  const float below4 = std::nextafter(4.0f, 0.0f);
  EXPECT_EQ(scale_exp({below4}, MxElement::fp4_e2m1), -1);
  EXPECT_EQ(scale_exp({std::nextafter(0x1p100f, 0.0f)}, MxElement::fp8_e4m3), 99 - 8);
  // And the block max then lands above fp4's max 6: 7.9999995 saturates to 6, i.e. 3.0.
  EXPECT_EQ(fake({below4, 1.0f}, MxElement::fp4_e2m1), (std::vector<float>{3.0f, 1.0f}));
}

TEST(MxScale, AmaxZeroUsesFp32MinNormal) {
  // floor(log2(amax)) := -126 -> -126 - emax, clamped at -127.
  const std::vector<float> z = {0.0f, -0.0f, 0.0f};
  for (MxElement e : kAll) {
    const e8m0 s = mx_shared_scale(z, e);
    EXPECT_EQ(s.bits, e == MxElement::int8 ? 1 : 0) << mx_info(e).name;
    const auto y = fake(z, e);
    for (float v : y) EXPECT_EQ(v, 0.0f);
  }
  EXPECT_TRUE(std::signbit(fake(z, MxElement::fp8_e4m3)[1]));  // -0 keeps its sign in fp formats
}

TEST(MxScale, BlockMaxAboveElementMaxSaturates) {
  // amax 480 = 1.875 * 2^8: shared 0 for E4M3 and 480 > 448 -> 448 (code 0x7E), not NaN.
  std::vector<uint8_t> data(2), scales(1);
  const std::vector<float> x = {480.0f, -480.0f};
  mx_quantize(data, scales, x, 2, MxElement::fp8_e4m3, {});
  EXPECT_EQ(scales[0], 127);
  EXPECT_EQ(data[0], 0x7E);
  EXPECT_EQ(data[1], 0xFE);
  // fp4: 7.5 -> shared 0, 7.5 > 6 -> 6; fp6 e3m2: 31 = 1.9375*2^4 -> shared 0, > 28 -> 28.
  EXPECT_EQ(fake({7.5f, 5.0f}, MxElement::fp4_e2m1), (std::vector<float>{6.0f, 4.0f}));
  EXPECT_EQ(fake({31.0f}, MxElement::fp6_e3m2), (std::vector<float>{28.0f}));
  EXPECT_EQ(fake({-7.9f}, MxElement::fp6_e2m3), (std::vector<float>{-7.5f}));
  // MXINT8: 1.99 * 2^k -> q = round(127.36) = 127 -> 127/64 * 2^k.
  EXPECT_EQ(fake({1.99f * 1024}, MxElement::int8), (std::vector<float>{127.0f / 64 * 1024}));
}

TEST(MxScale, SubnormalElements) {
  // E4M3 block with amax 1 (shared -8): 2^-17 scales to 2^-9, E4M3's min subnormal (code 0x01);
  // 2^-18 scales to half of it: a tie, to even (0); 1.5 * 2^-18 rounds up to 2^-9.
  std::vector<uint8_t> data(4), scales(1);
  const std::vector<float> x = {1.0f, 0x1p-17f, 0x1p-18f, 0x1.8p-18f};
  mx_quantize(data, scales, x, 4, MxElement::fp8_e4m3, {});
  EXPECT_EQ(scales[0], 127 - 8);
  EXPECT_EQ(data[1], 0x01);
  EXPECT_EQ(data[2], 0x00);
  EXPECT_EQ(data[3], 0x01);
  // fp32 subnormal amax: the exponent is taken from the leading one, exactly (2^-140 -> -140).
  EXPECT_EQ(scale_exp({0x1p-140f}, MxElement::int8), -127);  // clamped
  EXPECT_EQ(mx_shared_scale(0x00000001u, MxElement::fp8_e4m3).exponent(), -127);
}

TEST(MxScale, ClampsToTheE8M0Range) {
  // 2^-130 in E4M3: -130 - 8 = -138 -> -127; scaled 2^-3 is exact, so it decodes exactly.
  EXPECT_EQ(scale_exp({0x1p-130f}, MxElement::fp8_e4m3), -127);
  EXPECT_EQ(fake({0x1p-130f}, MxElement::fp8_e4m3), (std::vector<float>{0x1p-130f}));
  // 2^-140 in E5M2: scaled by 2^127 -> 2^-13, still an E5M2 value (min normal 2^-14): exact.
  EXPECT_EQ(fake({0x1p-140f}, MxElement::fp8_e5m2), (std::vector<float>{0x1p-140f}));
  // In fp4 it is far below half the min subnormal (0.25): flushed to 0.
  EXPECT_EQ(fake({0x1p-140f}, MxElement::fp4_e2m1), (std::vector<float>{0.0f}));
  // Top: FLT_MAX in MXINT8 has shared 127 - 0 = 127 (bits 254), q saturates to 127.
  const float big = std::numeric_limits<float>::max();
  EXPECT_EQ(mx_shared_scale({&big, 1}, MxElement::int8).bits, 254);
  EXPECT_EQ(fake({big}, MxElement::int8), (std::vector<float>{0x1.FCp127f}));  // 127/64 * 2^127
  // The same in E5M2: 57344 * 2^(127-15) = 1.75 * 2^127, finite.
  EXPECT_EQ(fake({big}, MxElement::fp8_e5m2), (std::vector<float>{0x1.Cp127f}));
}

TEST(MxScale, NanOrInfMakesTheBlockNan) {
  for (float special : {kNaN, kInf, -kInf}) {
    std::vector<float> x(64, 1.0f);
    x[5] = special;
    std::vector<uint8_t> data(64), scales(2);
    mx_quantize(data, scales, x, 64, MxElement::fp8_e5m2, {});
    EXPECT_EQ(scales[0], 0xFF);
    EXPECT_EQ(scales[1], 127 - 15);
    std::vector<float> y(64);
    mx_dequantize(y, data, scales, 64, MxElement::fp8_e5m2, 32);
    for (int i = 0; i < 32; ++i) EXPECT_TRUE(std::isnan(y[i])) << i;
    for (int i = 32; i < 64; ++i) EXPECT_EQ(y[i], 1.0f);
    const auto f = fake(x, MxElement::fp4_e2m1);
    EXPECT_TRUE(std::isnan(f[0]) && std::isnan(f[31]) && f[32] == 1.0f);
  }
}

// ---------------------------------- decoding ----------------------------------

TEST(MxDecode, EveryCodeTimesSeveralScalesIsExact) {
  const int exps[] = {-127, -100, -20, -1, 0, 1, 20, 100, 127};
  for (MxElement e : kAll) {
    for (uint32_t c = 0; c < num_codes(e); ++c) {
      for (int s : exps) {
        std::vector<uint8_t> data(1, static_cast<uint8_t>(c));
        if (e == MxElement::fp4_e2m1) data[0] = static_cast<uint8_t>(c | 0x50);  // junk high nibble
        const std::vector<uint8_t> scales = {static_cast<uint8_t>(s + 127)};
        float y = 0;
        mx_dequantize({&y, 1}, data, scales, 1, e, 32);
        const float want = static_cast<float>(std::ldexp(ref_value(e, c), s));
        EXPECT_TRUE(same_bits(y, want))
            << mx_info(e).name << " code " << c << " scale 2^" << s << ": " << y << " vs " << want;
      }
      std::vector<uint8_t> data(1, static_cast<uint8_t>(c)), nan_scale(1, 0xFF);
      float y = 0;
      mx_dequantize({&y, 1}, data, nan_scale, 1, e, 32);
      EXPECT_TRUE(std::isnan(y));
    }
  }
  // MXINT8's -128 is a valid two's complement code: -2.
  EXPECT_EQ(mx_decode_element(MxElement::int8, 0x80), -2.0);
  // fp6: only the low 6 bits are read.
  EXPECT_EQ(mx_decode_element(MxElement::fp6_e2m3, 0x1F), 7.5);
}

TEST(MxDecode, EncodeOfEveryDecodedCodeRoundTrips) {
  for (MxElement e : kAll) {
    for (uint32_t c = 0; c < num_codes(e); ++c) {
      const double v = ref_value(e, c);
      if (!std::isfinite(v) || (e == MxElement::int8 && c == 0x80)) continue;
      const uint32_t back = mx_encode_element(e, v, Round::nearest_even, 0);
      EXPECT_EQ(mx_decode_element(e, back), v) << mx_info(e).name << " code " << c;
    }
  }
}

// ---------------------------------- against the reference ----------------------------------

std::vector<float> random_tensor(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::uniform_int_distribution<int> ex(-30, 30);
  std::vector<float> x(n);
  int scale = 0;
  for (size_t i = 0; i < n; ++i) {
    if (i % 16 == 0) scale = ex(rng);  // magnitude changes within and across blocks
    x[i] = std::ldexp(nd(rng), scale);
    if (i % 37 == 0) x[i] = 0.0f;
    if (i % 101 == 0) x[i] = -x[i];
  }
  return x;
}

TEST(MxReference, FakeQuantizeMatchesBruteForceBitForBit) {
  for (MxElement e : kAll) {
    for (auto [rows, k, block] : {std::tuple{8, 96, 32}, {5, 45, 32}, {3, 33, 16}, {1, 7, 32}}) {
      const auto x = random_tensor(static_cast<size_t>(rows * k), 1234 + k);
      const auto got = fake(x, e, k, block);
      const auto want = ref_fake(x, e, k, block);
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_TRUE(same_bits(got[i], want[i]))
            << mx_info(e).name << " K=" << k << " i=" << i << " x=" << x[i] << " got " << got[i]
            << " want " << want[i];
      }
    }
  }
}

TEST(MxReference, RoundTripErrorIsWithinHalfAnElementUlp) {
  // For unsaturated elements |x - q| <= 2^(shared + e_x - m) / 2 with e_x = x's binade in the
  // element grid (subnormals: the min normal's binade).
  for (MxElement e : {MxElement::fp8_e4m3, MxElement::fp6_e3m2, MxElement::fp4_e2m1}) {
    const Fields f = fields_of(e);
    const auto x = random_tensor(4096, 99);
    const auto y = fake(x, e, 4096, 32);
    for (size_t b = 0; b < x.size(); b += 32) {
      const int shared = scale_exp(std::vector<float>(x.begin() + b, x.begin() + b + 32), e);
      for (size_t i = b; i < b + 32; ++i) {
        const double scaled = std::ldexp(std::fabs(x[i]), -shared);
        if (scaled >= mx_info(e).max_finite) continue;
        int bin = scaled > 0 ? std::ilogb(scaled) : 0;
        bin = std::max(bin, 1 - f.bias);
        EXPECT_LE(std::fabs(static_cast<double>(x[i]) - y[i]), std::ldexp(0.5, shared + bin - f.M))
            << mx_info(e).name << " i=" << i;
      }
    }
  }
}

TEST(MxReference, FakeQuantizeEqualsQuantizeThenDequantize) {
  for (MxElement e : kAll) {
    const auto x = random_tensor(6 * 50, 7);
    std::vector<uint8_t> data(static_cast<size_t>(mx_data_bytes(e, 300)));
    std::vector<uint8_t> scales(static_cast<size_t>(mx_num_blocks(300, 50, 32)));
    ASSERT_EQ(scales.size(), 12u);  // 6 rows x ceil(50 / 32)
    MxOptions o;
    o.round = Round::stochastic;
    o.seed = 42;
    mx_quantize(data, scales, x, 50, e, o);
    std::vector<float> y(300);
    mx_dequantize(y, data, scales, 50, e, 32);
    auto z = x;
    mx_fake_quantize(z, 50, e, o);
    for (size_t i = 0; i < y.size(); ++i) ASSERT_TRUE(same_bits(y[i], z[i])) << i;
  }
}

// ---------------------------------- layout ----------------------------------

TEST(MxLayout, Fp4TwoPerByteElementZeroInTheLowNibble) {
  // amax 4 -> shared 0. Codes: 1.0 = 0.01.0 (0x2), -0.5 = 1.00.1 (0x9), 4 = 0.11.0 (0x6),
  // 6 = 0.11.1 (0x7), -3 = 1.10.1 (0xD).
  const std::vector<float> x = {1.0f, -0.5f, 4.0f, 6.0f, -3.0f};
  std::vector<uint8_t> data(3, 0xAA), scales(1);
  mx_quantize(data, scales, x, 5, MxElement::fp4_e2m1, {});
  EXPECT_EQ(scales[0], 127 + 0);
  EXPECT_EQ(data[0], 0x92);
  EXPECT_EQ(data[1], 0x76);
  EXPECT_EQ(data[2], 0x0D);  // odd count: the padding nibble is zero
}

TEST(MxLayout, Fp6OnePerByteInTheLowSixBits) {
  // E2M3, amax 7.5 -> shared 0: 7.5 = 0.11.111 (0x1F), -1.0 = 1.01.000 (0x28).
  std::vector<uint8_t> data(2), scales(1);
  mx_quantize(data, scales, std::vector<float>{7.5f, -1.0f}, 2, MxElement::fp6_e2m3, {});
  EXPECT_EQ(data[0], 0x1F);
  EXPECT_EQ(data[1], 0x28);
  // E3M2, amax 28 -> shared 0: 28 = 0.111.11 (0x1F), -0.25 = 1.001.00 (0x24).
  mx_quantize(data, scales, std::vector<float>{28.0f, -0.25f}, 2, MxElement::fp6_e3m2, {});
  EXPECT_EQ(data[0], 0x1F);
  EXPECT_EQ(data[1], 0x24);
}

TEST(MxLayout, Int8IsTwosComplementFixedPoint) {
  // amax 1.5 -> shared 0: q = x * 64: 1.5 -> 96 (0x60), -1.5 -> -96 (0xA0), 1/128 -> 0.5 -> 0 (tie
  // to even), 3/128 -> 1.5 -> 2.
  std::vector<uint8_t> data(4), scales(1);
  mx_quantize(data, scales, std::vector<float>{1.5f, -1.5f, 1.0f / 128, 3.0f / 128}, 4,
              MxElement::int8, {});
  EXPECT_EQ(scales[0], 127);
  EXPECT_EQ(data[0], 0x60);
  EXPECT_EQ(data[1], 0xA0);
  EXPECT_EQ(data[2], 0x00);
  EXPECT_EQ(data[3], 0x02);
}

TEST(MxLayout, PartialBlocksNeverSpanRows) {
  // 2 rows of 40 with blocks of 32: blocks [0,32) [32,40) [40,72) [72,80).
  std::vector<float> x(80, 1.0f);
  x[35] = 64.0f;  // only row 0's second block sees it
  std::vector<uint8_t> data(80), scales(static_cast<size_t>(mx_num_blocks(80, 40, 32)));
  ASSERT_EQ(scales.size(), 4u);
  mx_quantize(data, scales, x, 40, MxElement::fp8_e4m3, {});
  EXPECT_EQ(scales[0], 127 - 8);
  EXPECT_EQ(scales[1], 127 + 6 - 8);
  EXPECT_EQ(scales[2], 127 - 8);
  EXPECT_EQ(scales[3], 127 - 8);
}

// ---------------------------------- stochastic rounding ----------------------------------

TEST(MxStochastic, ReproducibleAndUnbiased) {
  // fp4 block [4, 1.3 x 31]: shared 0, 1.3 lies between 1.0 and 1.5 (up with probability 0.6).
  const int blocks = 2000;
  std::vector<float> x(32 * blocks, 1.3f);
  for (int b = 0; b < blocks; ++b) x[32 * b] = 4.0f;
  MxOptions o;
  o.round = Round::stochastic;
  o.seed = 7;
  auto y1 = x, y2 = x, y3 = x;
  mx_fake_quantize(y1, 32, MxElement::fp4_e2m1, o);
  mx_fake_quantize(y2, 32, MxElement::fp4_e2m1, o);
  o.seed = 8;
  mx_fake_quantize(y3, 32, MxElement::fp4_e2m1, o);
  EXPECT_EQ(y1, y2);
  EXPECT_NE(y1, y3);
  double sum = 0;
  int n = 0;
  for (size_t i = 0; i < y1.size(); ++i) {
    if (i % 32 == 0) continue;
    ASSERT_TRUE(y1[i] == 1.0f || y1[i] == 1.5f) << y1[i];
    sum += y1[i];
    ++n;
  }
  // 62000 draws of a Bernoulli(0.6) scaled by 0.5: sd of the mean ~ 0.001.
  EXPECT_NEAR(sum / n, 1.3, 0.006);
}

// ---------------------------------- errors ----------------------------------

TEST(MxErrors, SaySizesAndFixes) {
  std::vector<float> x(10, 1.0f);
  std::vector<uint8_t> data(10), scales(1);
  MxOptions bad;
  bad.block_size = 0;
  EXPECT_THROW(mx_quantize(data, scales, x, 10, MxElement::fp8_e4m3, bad), std::invalid_argument);
  try {
    mx_quantize(data, scales, x, 3, MxElement::fp8_e4m3, {});
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("last dimension"), std::string::npos) << e.what();
  }
  try {
    std::vector<uint8_t> small(4);
    mx_quantize(small, scales, x, 10, MxElement::fp4_e2m1, {});
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("needs 5 data bytes and 1 scales"), std::string::npos)
        << e.what();
  }
  std::vector<float> out(10);
  EXPECT_THROW(mx_dequantize(out, data, std::vector<uint8_t>(2), 10, MxElement::fp8_e4m3, 32),
               std::invalid_argument);
}

TEST(MxErrors, EmptyTensorIsFine) {
  std::vector<float> x;
  std::vector<uint8_t> none;
  EXPECT_EQ(mx_num_blocks(0, 0, 32), 0);
  EXPECT_NO_THROW(mx_quantize(none, none, x, 0, MxElement::fp4_e2m1, {}));
  EXPECT_NO_THROW(mx_fake_quantize(x, 0, MxElement::fp4_e2m1, {}));
}

}  // namespace
}  // namespace mixp
