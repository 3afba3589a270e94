// Blockwise int4 and NF4: code choice at every NF4 midpoint (ties to the lower code) and just
// either side, nibble order, partial last blocks, zero blocks, NaN handling, errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "mixp/format/block_int4.h"

namespace mixp {
namespace {

struct Packed {
  std::vector<uint8_t> data;
  std::vector<float> scales;
};

Packed quantize(const std::vector<float>& x, Block4 k, int block = 64,
                Round r = Round::nearest_even, uint64_t seed = 0) {
  Packed p;
  p.data.assign(static_cast<size_t>(block4_data_bytes(static_cast<int64_t>(x.size()))), 0xEE);
  p.scales.resize(static_cast<size_t>(block4_num_blocks(static_cast<int64_t>(x.size()), block)));
  block4_quantize(p.data, p.scales, x, k, block, r, seed);
  return p;
}

std::vector<float> dequantize(const Packed& p, size_t n, Block4 k, int block = 64) {
  std::vector<float> y(n);
  block4_dequantize(y, p.data, p.scales, k, block);
  return y;
}

// ---------------------------------- NF4 ----------------------------------

TEST(Nf4, CodeTableIsQLoRAs) {
  EXPECT_EQ(kNf4Codes[0], -1.0f);
  EXPECT_EQ(kNf4Codes[7], 0.0f);
  EXPECT_EQ(kNf4Codes[15], 1.0f);
  EXPECT_EQ(kNf4Codes[8], 0.07958029955625534f);
  for (size_t i = 0; i < 16; ++i) {
    EXPECT_EQ(nf4_nearest_code(kNf4Codes[i]), i);  // every code maps to itself
    EXPECT_EQ(block4_code_value(Block4::nf4, static_cast<uint32_t>(i)), kNf4Codes[i]);
  }
}

TEST(Nf4, EveryMidpointTiesToTheLowerCodeAndEitherSideIsNearest) {
  int exact_ties = 0;
  for (int j = 0; j < 15; ++j) {
    const double m = (static_cast<double>(kNf4Codes[j]) + kNf4Codes[j + 1]) / 2.0;
    // The largest float <= m and the smallest float > m.
    float lo = static_cast<float>(m);
    if (lo > m) lo = std::nextafter(lo, -2.0f);
    const float hi = std::nextafter(lo, 2.0f);
    ASSERT_LE(lo, m);
    ASSERT_GT(hi, m);
    EXPECT_EQ(nf4_nearest_code(lo), j) << "midpoint " << j << " at/below " << lo;
    EXPECT_EQ(nf4_nearest_code(hi), j + 1) << "midpoint " << j << " above " << hi;
    EXPECT_EQ(nf4_nearest_code(std::nextafter(lo, -2.0f)), j);
    if (lo == m) {
      ++exact_ties;
      // Through the block path too: absmax 1 makes x / absmax == x.
      const auto p = quantize({1.0f, lo, hi, -1.0f}, Block4::nf4);
      EXPECT_EQ(p.data[0], 0xF0 | j) << "midpoint " << j;
      EXPECT_EQ(p.data[1], ((j + 1) << 4) | 0x0) << "midpoint " << j;
    }
  }
  EXPECT_EQ(exact_ties, 6);  // midpoints 2, 6, 7, 9, 11, 13 are fp32 numbers: real ties
}

TEST(Nf4, FirstElementInTheHighNibble) {
  // absmax 2: normalized [1, -1, 0, 0.5, c3] -> codes 15, 0, 7, 12, 3 (0.5 is 0.059 from
  // 0.4407 and 0.063 from 0.5626).
  const auto p = quantize({2.0f, -2.0f, 0.0f, 1.0f, 2.0f * kNf4Codes[3]}, Block4::nf4);
  ASSERT_EQ(p.data.size(), 3u);
  EXPECT_EQ(p.data[0], 0xF0);
  EXPECT_EQ(p.data[1], 0x7C);
  EXPECT_EQ(p.data[2], 0x30);  // odd count: the low (second) nibble is zero padding
  EXPECT_EQ(p.scales, (std::vector<float>{2.0f}));
  const auto y = dequantize(p, 5, Block4::nf4);
  EXPECT_EQ(y, (std::vector<float>{2.0f, -2.0f, 0.0f, 2.0f * kNf4Codes[12], 2.0f * kNf4Codes[3]}));
}

TEST(Nf4, DequantizedValuesAreCodeTimesAbsmax) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  std::vector<float> x(64 * 5 + 17);
  for (auto& v : x) v = nd(rng);
  const auto p = quantize(x, Block4::nf4);
  ASSERT_EQ(p.scales.size(), 6u);
  const auto y = dequantize(p, x.size(), Block4::nf4);
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t b = i / 64;
    float absmax = 0;
    for (size_t k = b * 64; k < std::min(x.size(), b * 64 + 64); ++k)
      absmax = std::max(absmax, std::fabs(x[k]));
    ASSERT_EQ(p.scales[b], absmax) << "block " << b;  // the partial last block has its own absmax
    // Independent nearest search over the table (ties to the lower code).
    const double n = static_cast<double>(x[i] / absmax);
    int best = 0;
    for (int c = 1; c < 16; ++c) {
      if (std::fabs(kNf4Codes[c] - n) < std::fabs(kNf4Codes[best] - n)) best = c;
    }
    ASSERT_EQ(y[i], kNf4Codes[best] * absmax) << i;
  }
}

// ---------------------------------- int4 ----------------------------------

TEST(Int4, SymmetricAbsmaxOver7WithTiesToEven) {
  // absmax 7 -> scale 1: q = round(x): 3.5 -> 4, 2.5 -> 2, -3.5 -> -4, -0.4 -> 0.
  const std::vector<float> x = {7.0f, -7.0f, 3.5f, 2.5f, -3.5f, -0.4f, 1.0f};
  const auto p = quantize(x, Block4::int4);
  EXPECT_EQ(p.scales, (std::vector<float>{1.0f}));
  // Element 2i in the LOW nibble, two's complement: 7 = 0x7, -7 = 0x9, 4 = 0x4, 2 = 0x2,
  // -4 = 0xC, 0 = 0x0, 1 = 0x1 (+ zero padding).
  EXPECT_EQ(p.data, (std::vector<uint8_t>{0x97, 0x24, 0x0C, 0x01}));
  EXPECT_EQ(dequantize(p, x.size(), Block4::int4),
            (std::vector<float>{7.0f, -7.0f, 4.0f, 2.0f, -4.0f, 0.0f, 1.0f}));
}

TEST(Int4, ScaleIsFp32AbsmaxOver7AndMinus8DecodesButIsNeverProduced) {
  const std::vector<float> x = {0.3f, -1.0f, 0.5f};
  const auto p = quantize(x, Block4::int4);
  EXPECT_EQ(p.scales[0], 1.0f / 7.0f);
  // -1 / fp32(1/7) = -6.9999998 in fp32, rounds to -7 (never -8).
  EXPECT_EQ(p.data[0] >> 4, 0x9);
  EXPECT_EQ(block4_code_value(Block4::int4, 0x8), -8.0f);
  Packed crafted{{0x08}, {0.5f}};
  EXPECT_EQ(dequantize(crafted, 2, Block4::int4), (std::vector<float>{-4.0f, 0.0f}));
}

TEST(Int4, PartialLastBlockAndZeroBlocks) {
  // 64 zeros then 3 values: block 0 scale 0 (decodes to zeros), block 1 has absmax 14 -> scale 2.
  std::vector<float> x(67, 0.0f);
  x[64] = 14.0f;
  x[65] = -3.0f;  // -1.5 -> -2 (tie to even)
  x[66] = 5.0f;   // 2.5 -> 2
  const auto p = quantize(x, Block4::int4);
  EXPECT_EQ(p.scales, (std::vector<float>{0.0f, 2.0f}));
  ASSERT_EQ(p.data.size(), 34u);
  EXPECT_EQ(p.data[32], 0xE7);  // 7 low, -2 (0xE) high
  EXPECT_EQ(p.data[33], 0x02);
  const auto y = dequantize(p, 67, Block4::int4);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[64], 14.0f);
  EXPECT_EQ(y[65], -4.0f);
  EXPECT_EQ(y[66], 4.0f);
  // NF4 zero block: code 7 (0.0) everywhere, scale 0.
  const auto z = quantize(std::vector<float>(4, 0.0f), Block4::nf4);
  EXPECT_EQ(z.data, (std::vector<uint8_t>{0x77, 0x77}));
}

// ---------------------------------- both ----------------------------------

TEST(Block4, FakeQuantizeEqualsQuantizeThenDequantize) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  std::vector<float> x(1000);
  for (auto& v : x) v = nd(rng);
  for (Block4 k : {Block4::int4, Block4::nf4}) {
    for (Round r : {Round::nearest_even, Round::stochastic}) {
      for (int bs : {64, 32, 2}) {
        const auto y = dequantize(quantize(x, k, bs, r, 9), x.size(), k, bs);
        auto z = x;
        block4_fake_quantize(z, k, bs, r, 9);
        ASSERT_EQ(y, z) << static_cast<int>(k) << " block " << bs;
      }
    }
  }
}

TEST(Block4, StochasticRoundingIsUnbiased) {
  // int4 block [7, 2.3 x 63]: scale 1, 2.3 -> 3 with probability 0.3.
  // nf4 block [1, 0.3 x 63]: between codes 0.24611 and 0.33792, up with p = 0.58658.
  const int blocks = 500;
  for (Block4 k : {Block4::int4, Block4::nf4}) {
    const float top = k == Block4::int4 ? 7.0f : 1.0f;
    const float v = k == Block4::int4 ? 2.3f : 0.3f;
    std::vector<float> x(64 * blocks, v);
    for (int b = 0; b < blocks; ++b) x[64 * b] = top;
    auto y = x;
    block4_fake_quantize(y, k, 64, Round::stochastic, 1);
    double sum = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      if (i % 64 != 0) sum += y[i];
    }
    EXPECT_NEAR(sum / (63.0 * blocks), v, k == Block4::int4 ? 0.01 : 0.001) << static_cast<int>(k);
  }
}

TEST(Block4, NanInputThrowsButFakeQuantizeMakesTheBlockNan) {
  std::vector<float> x(70, 1.0f);
  x[66] = std::numeric_limits<float>::infinity();
  try {
    quantize(x, Block4::nf4);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("value 66"), std::string::npos) << e.what();
  }
  block4_fake_quantize(x, Block4::int4, 64, Round::nearest_even, 0);
  EXPECT_EQ(x[63], 1.0f);
  EXPECT_TRUE(std::isnan(x[64]) && std::isnan(x[69]));
}

TEST(Block4, Errors) {
  const std::vector<float> x(8, 1.0f);
  std::vector<uint8_t> data(4);
  std::vector<float> scales(1);
  try {
    block4_quantize(data, scales, x, Block4::nf4, 7, Round::nearest_even, 0);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("even"), std::string::npos) << e.what();
  }
  EXPECT_THROW(block4_quantize(data, scales, x, Block4::int4, 0, Round::nearest_even, 0),
               std::invalid_argument);
  EXPECT_THROW(block4_quantize(data, scales, x, Block4::int4, 64, Round::toward_zero, 0),
               std::invalid_argument);
  std::vector<float> two(2);
  EXPECT_THROW(block4_quantize(data, two, x, Block4::int4, 64, Round::nearest_even, 0),
               std::invalid_argument);
  std::vector<float> out(9);
  EXPECT_THROW(block4_dequantize(out, data, scales, Block4::int4, 64), std::invalid_argument);
}

}  // namespace
}  // namespace mixp
