// The name-driven entry point: scheme names, storage contract (dtypes, sizes, scale shapes,
// little-endian scale bytes), agreement with fake quantization, and error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/error_of.h"
#include "mixp/format/block.h"

namespace mixp {
namespace {

std::vector<float> randn(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> x(n);
  for (auto& v : x) v = nd(rng);
  return x;
}

std::string error_of(auto&& fn) {
  return ::mixp::test::error_of<std::invalid_argument>(fn);
}

TEST(BlockScheme, NamesAndLookup) {
  const std::vector<std::string> want = {"mxfp8_e4m3", "mxfp8_e5m2",  "mxfp6_e2m3",  "mxfp6_e3m2",
                                         "mxfp4",      "mxint8",      "int4",        "nf4",
                                         "int8",       "int8_affine", "int8_channel"};
  EXPECT_EQ(block_scheme_names(), want);
  for (const auto& n : want) EXPECT_TRUE(is_block_scheme(n)) << n;
  EXPECT_FALSE(is_block_scheme("fp8_e4m3"));
  EXPECT_FALSE(is_block_scheme("MXFP4"));
  EXPECT_EQ(default_block_size("mxfp4"), 32);
  EXPECT_EQ(default_block_size("nf4"), 64);
  EXPECT_EQ(default_block_size("int8_channel"), 0);
  const std::string msg = error_of([] { quantize_block(std::vector<float>(1), {1}, {"mxfp5"}); });
  EXPECT_NE(msg.find("unknown block format 'mxfp5'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mxfp8_e4m3, mxfp8_e5m2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("int8_channel"), std::string::npos) << msg;
}

struct Expect {
  std::string scheme;
  DType element, scale;
  int block;
  size_t data_bytes, scale_bytes;
  std::vector<int64_t> scale_shape;
};

TEST(BlockTensor, StorageContractForEveryScheme) {
  // A {3, 50} tensor: MX rows of 50 -> 2 blocks each; 150 values -> 3 blocks of 64.
  const std::vector<int64_t> shape = {3, 50};
  const auto x = randn(150, 1);
  const std::vector<Expect> cases = {
      {"mxfp8_e4m3", DType::fp8_e4m3, DType::e8m0, 32, 150, 6, {3, 2}},
      {"mxfp8_e5m2", DType::fp8_e5m2, DType::e8m0, 32, 150, 6, {3, 2}},
      {"mxfp6_e2m3", DType::fp6_e2m3, DType::e8m0, 32, 150, 6, {3, 2}},
      {"mxfp6_e3m2", DType::fp6_e3m2, DType::e8m0, 32, 150, 6, {3, 2}},
      {"mxfp4", DType::fp4_e2m1, DType::e8m0, 32, 75, 6, {3, 2}},
      {"mxint8", DType::int8, DType::e8m0, 32, 150, 6, {3, 2}},
      {"int4", DType::int4, DType::fp32, 64, 75, 12, {3}},
      {"nf4", DType::nf4, DType::fp32, 64, 75, 12, {3}},
      {"int8", DType::int8, DType::fp32, 0, 150, 4, {1}},
      {"int8_affine", DType::int8, DType::fp32, 0, 150, 4, {1}},
      {"int8_channel", DType::int8, DType::fp32, 0, 150, 12, {3}},
  };
  for (const auto& c : cases) {
    for (Round r : {Round::nearest_even, Round::stochastic}) {
      const BlockSpec spec{c.scheme, 0, r, 17};
      const BlockTensor t = quantize_block(x, shape, spec);
      EXPECT_EQ(t.scheme, c.scheme);
      EXPECT_EQ(t.shape, shape);
      EXPECT_EQ(t.element, c.element) << c.scheme;
      EXPECT_EQ(t.scale_dtype, c.scale) << c.scheme;
      EXPECT_EQ(t.block_size, c.block) << c.scheme;
      EXPECT_EQ(t.data.size(), c.data_bytes) << c.scheme;
      EXPECT_EQ(t.scales.size(), c.scale_bytes) << c.scheme;
      EXPECT_EQ(block_scale_shape(t), c.scale_shape) << c.scheme;
      EXPECT_EQ(t.zero_points.size(), c.scheme == "int8_affine" ? 1u : 0u) << c.scheme;
      std::vector<float> y(150);
      dequantize_block(t, y);
      auto z = x;
      fake_quantize_block(z, shape, spec);
      EXPECT_EQ(y, z) << c.scheme;
      // Coarse sanity: every format keeps N(0,1) data within its own relative error.
      double err = 0, ref = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        err += (x[i] - y[i]) * (x[i] - y[i]);
        ref += x[i] * x[i];
      }
      EXPECT_LT(std::sqrt(err / ref), 0.25) << c.scheme;
    }
  }
}

TEST(BlockTensor, ScalesAreLittleEndianBytes) {
  // int8 symmetric of [-1, 3]: scale 3/127.5; int4 of [7, 1]: scale 1.0 = 0x3F800000.
  BlockTensor t = quantize_block(std::vector<float>{-1.0f, 3.0f}, {2}, {"int8"});
  float s = 0;
  std::memcpy(&s, t.scales.data(), 4);  // x86 is little-endian
  EXPECT_EQ(s, 3.0f / 127.5f);
  t = quantize_block(std::vector<float>{7.0f, 1.0f}, {2}, {"int4"});
  EXPECT_EQ(t.scales, (std::vector<uint8_t>{0x00, 0x00, 0x80, 0x3F}));
  EXPECT_EQ(t.data, (std::vector<uint8_t>{0x17}));
  t = quantize_block(std::vector<float>{-1.0f, 3.0f}, {2}, {"int8_affine"});
  EXPECT_EQ(t.zero_points, (std::vector<int32_t>{-64}));
  t = quantize_block(std::vector<float>{1.0f, 4.0f}, {2}, {"mxfp4"});
  EXPECT_EQ(t.scales, (std::vector<uint8_t>{127}));
  EXPECT_EQ(t.data, (std::vector<uint8_t>{0x62}));  // 1.0 low nibble (0x2), 4.0 high (0x6)
}

TEST(BlockTensor, ShapesOfAnyRank) {
  // Rank 0: one value, one MX block.
  BlockTensor t = quantize_block(std::vector<float>{3.0f}, {}, {"mxfp8_e4m3"});
  EXPECT_EQ(block_scale_shape(t), (std::vector<int64_t>{1}));
  float y = 0;
  dequantize_block(t, {&y, 1});
  EXPECT_EQ(y, 3.0f);
  // Rank 3, MX blocks along the last dim: {2, 2, 33} -> scales {2, 2, 2}.
  t = quantize_block(randn(132, 2), {2, 2, 33}, {"mxfp6_e3m2"});
  EXPECT_EQ(t.scales.size(), 8u);
  EXPECT_EQ(block_scale_shape(t), (std::vector<int64_t>{2, 2, 2}));
  // A custom block size and an odd block size where packing allows it.
  t = quantize_block(randn(96, 3), {96}, {"mxfp8_e5m2", 16});
  EXPECT_EQ(t.block_size, 16);
  EXPECT_EQ(t.scales.size(), 6u);
  EXPECT_NO_THROW(quantize_block(randn(10, 3), {10}, {"mxint8", 5}));
  // Empty tensors.
  t = quantize_block({}, {0, 4}, {"nf4"});
  EXPECT_TRUE(t.data.empty() && t.scales.empty());
  std::vector<float> none;
  EXPECT_NO_THROW(dequantize_block(t, none));
}

TEST(BlockTensor, IntegerSchemesRefuseNanButFakeQuantizeKeepsIt) {
  std::vector<float> x = {1.0f, std::nanf(""), 2.0f, -3.0f};
  for (const char* s : {"int8", "int8_affine", "int8_channel", "int4", "nf4"}) {
    EXPECT_THROW(quantize_block(x, {2, 2}, {s}), std::invalid_argument) << s;
    auto y = x;
    EXPECT_NO_THROW(fake_quantize_block(y, {2, 2}, {s})) << s;
    EXPECT_TRUE(std::isnan(y[1])) << s;
  }
  // int8 fake quantization takes its range from the finite values: inf saturates to it.
  std::vector<float> z = {std::numeric_limits<float>::infinity(), 127.5f, -1.0f};
  fake_quantize_block(z, {3}, {"int8"});
  EXPECT_EQ(z[0], 127.0f);
  EXPECT_EQ(z[1], 127.0f);
  EXPECT_EQ(z[2], -1.0f);
  // MX keeps NaN in storage: the block's scale is NaN.
  const BlockTensor t = quantize_block(x, {4}, {"mxfp4"});
  EXPECT_EQ(t.scales[0], 0xFF);
}

TEST(BlockTensor, ErrorsSayWhatAndHow) {
  const auto x = randn(8, 4);
  std::string m = error_of([&] { quantize_block(x, {3, 3}, {"mxfp4"}); });
  EXPECT_NE(m.find("holds 9 values but the buffer has 8"), std::string::npos) << m;
  m = error_of([&] { quantize_block(x, {8}, {"mxfp4", 7}); });
  EXPECT_NE(m.find("even"), std::string::npos) << m;
  m = error_of([&] { quantize_block(x, {8}, {"nf4", 33}); });
  EXPECT_NE(m.find("even"), std::string::npos) << m;
  m = error_of([&] { quantize_block(x, {8}, {"mxfp8_e4m3", -1}); });
  EXPECT_NE(m.find("positive"), std::string::npos) << m;
  m = error_of([&] { quantize_block(x, {8}, {"nf4", 0, Round::toward_zero}); });
  EXPECT_NE(m.find("nearest-even or stochastic"), std::string::npos) << m;
  m = error_of([&] { quantize_block(std::vector<float>{1.0f}, {}, {"int8_channel"}); });
  EXPECT_NE(m.find("rank >= 1"), std::string::npos) << m;
  // The int8 schemes have no blocks: a block size is ignored.
  EXPECT_EQ(quantize_block(x, {8}, {"int8", 32}).block_size, 0);

  // Inconsistent tensors (as read from a file) are refused.
  BlockTensor t = quantize_block(x, {2, 4}, {"mxfp8_e4m3"});
  std::vector<float> y(8);
  t.scales.push_back(0);
  EXPECT_THROW(dequantize_block(t, y), std::invalid_argument);
  t = quantize_block(x, {2, 4}, {"nf4"});
  t.element = DType::int4;
  m = error_of([&] { dequantize_block(t, y); });
  EXPECT_NE(m.find("element nf4"), std::string::npos) << m;
  t = quantize_block(x, {2, 4}, {"nf4"});
  t.block_size = 0;
  EXPECT_THROW(dequantize_block(t, y), std::invalid_argument);
  t = quantize_block(x, {2, 4}, {"int8_affine"});
  t.zero_points.clear();
  m = error_of([&] { dequantize_block(t, y); });
  EXPECT_NE(m.find("zero points"), std::string::npos) << m;
  t = quantize_block(x, {2, 4}, {"int8_channel"});
  t.scales.resize(4);
  EXPECT_THROW(dequantize_block(t, y), std::invalid_argument);
  std::vector<float> wrong(7);
  EXPECT_THROW(dequantize_block(quantize_block(x, {8}, {"mxint8"}), wrong), std::invalid_argument);
  t.scheme = "fp8";
  EXPECT_THROW(dequantize_block(t, y), std::invalid_argument);
}

}  // namespace
}  // namespace mixp
