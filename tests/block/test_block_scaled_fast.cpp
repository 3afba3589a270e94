// The fast block-scaled quantizers (src/format/block_scaled.cpp: SIMD loops per tier,
// OpenMP over tile rows, fused fake quantization) against the scalar reference
// (block_scaled_quantize_reference, src/format/block_scaled_ref.cpp) on random data with NaN,
// +-inf, +-0, fp32 subnormals, huge values and all-zero tiles, on ragged shapes, for every scheme,
// tile, rounding and SIMD tier this host has: any differing code, scale, amax or dequantized bit
// fails. (test_block_scaled.cpp checks the same functions against Transformer Engine's
// definitions, written independently.)
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "format/block_scaled_kernels.h"
#include "mixp/format/block_scaled.h"
#include "mixp/format/cpu_features.h"

namespace mixp {
namespace {

using Vec = std::vector<float>;

// Gaussian values spread over many binades, with specials sprinkled in when `specials`.
Vec make_data(int64_t n, uint32_t seed, bool specials) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::uniform_int_distribution<int> ex(-30, 30), pick(0, 99);
  Vec x(static_cast<size_t>(n));
  for (auto& v : x) {
    v = std::ldexp(nd(rng), ex(rng) / 6);
    if (!specials) continue;
    switch (pick(rng)) {
      case 0: v = std::numeric_limits<float>::quiet_NaN(); break;
      case 1: v = -std::numeric_limits<float>::quiet_NaN(); break;
      case 2: v = 0.0f; break;
      case 3: v = -0.0f; break;
      case 4: v = std::numeric_limits<float>::denorm_min() * 7; break;
      case 5: v = -1e-39f; break;
      case 6: v = 3e38f; break;
      default: break;
    }
  }
  // An all-zero stretch (whole tiles of zeros), when long enough.
  for (size_t i = x.size() / 3; i < x.size() / 3 + 300 && i < x.size(); ++i) x[i] = 0.0f;
  return x;
}

// Bitwise, NaN equal to NaN (payloads may differ: a NaN's dequantized value is NaN either way).
bool same(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

struct Case {
  BlockScheme scheme;
  int tile_rows;
  Round round;
  bool pow2;
};
std::string name(const Case& c) {
  return std::string(to_string(c.scheme)) + " tile " + std::to_string(c.tile_rows) +
         (c.round == Round::stochastic ? " sr" : "") + (c.pow2 ? " pow2" : "");
}

std::vector<const detail::BlockKernels*> tiers() {
  std::vector<const detail::BlockKernels*> t{&detail::block_kernels_generic()};
  if (cpu_features().use_avx512()) t.push_back(&detail::block_kernels_avx512());
  return t;
}

void check(const Case& c, int64_t rows, int64_t cols, const Vec& x, const std::string& what) {
  const BlockScaledOptions o{.scheme = c.scheme, .tile_rows = c.tile_rows, .pow2_scales = c.pow2,
                             .round = c.round, .seed = 0x1234567890abcdefULL};
  const BlockScaledTensor ref = block_scaled_quantize_reference(x, rows, cols, o);
  Vec deq_ref(x.size());
  block_scaled_dequantize_reference(ref, deq_ref);
  for (const detail::BlockKernels* k : tiers()) {
    const std::string where = what + " " + name(c) + " tier " +
                              (k == &detail::block_kernels_generic() ? "generic" : "avx512");
    const BlockScaledTensor q = detail::block_scaled_quantize_with(*k, x, rows, cols, o);
    ASSERT_EQ(q.codes, ref.codes) << where;
    ASSERT_EQ(q.scale_codes, ref.scale_codes) << where;
    ASSERT_EQ(q.scales.size(), ref.scales.size()) << where;
    for (size_t i = 0; i < q.scales.size(); ++i) ASSERT_TRUE(same(q.scales[i], ref.scales[i])) << where << " tile " << i;
    ASSERT_TRUE(same(q.global_amax, ref.global_amax)) << where;
    Vec fq = x;
    detail::block_scaled_fake_quantize_with(*k, fq, rows, cols, o);
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_TRUE(same(fq[i], deq_ref[i])) << where << " fake quantize, element " << i << ": " << fq[i] << " vs " << deq_ref[i];
  }
  // The fast dequantizer, and the factors (host tier).
  Vec deq(x.size());
  block_scaled_dequantize(ref, deq);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_TRUE(same(deq[i], deq_ref[i])) << what << " " << name(c) << " dequantize " << i;
  Vec part(x.size());
  const BlockScaledFactors f = block_scaled_fake_quantize_factors(x, rows, cols, o, part);
  std::vector<uint16_t> part16(x.size());
  const BlockScaledFactors f16 = block_scaled_fake_quantize_factors(x, rows, cols, o, part16);
  ASSERT_TRUE(same(f16.tensor_scale, f.tensor_scale));
  for (size_t i = 0; i < x.size(); ++i)
    if (std::isfinite(part[i])) {
      ASSERT_EQ(part16[i], std::bit_cast<uint32_t>(part[i]) >> 16) << what << " " << name(c) << " bf16 " << i;
    }
  const int tw = block_scaled_tile_cols(c.scheme);
  const int64_t gc = (cols + tw - 1) / tw;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t col = 0; col < cols; ++col) {
      const size_t i = static_cast<size_t>(r * cols + col);
      const float p = part[i];
      if (std::isfinite(p)) {  // exact in bf16: the low 16 bits are zero
        ASSERT_EQ(std::bit_cast<uint32_t>(p) & 0xFFFFu, 0u) << what << " " << name(c) << " " << p;
      }
      const float v = c.scheme == BlockScheme::fp8_block
                          ? p * f.tile_scales[static_cast<size_t>((r / c.tile_rows) * gc + col / tw)]
                          : (c.scheme == BlockScheme::nvfp4 ? p * f.tensor_scale : p);
      ASSERT_TRUE(same(v, deq_ref[i])) << what << " " << name(c) << " factors, element " << i;
    }
}

const Case kCases[] = {
    {BlockScheme::nvfp4, 1, Round::nearest_even, false},
    {BlockScheme::nvfp4, 16, Round::nearest_even, false},
    {BlockScheme::nvfp4, 1, Round::stochastic, false},
    {BlockScheme::nvfp4, 16, Round::stochastic, false},
    {BlockScheme::mxfp4, 1, Round::nearest_even, false},
    {BlockScheme::mxfp4, 1, Round::stochastic, false},
    {BlockScheme::fp8_block, 1, Round::nearest_even, false},
    {BlockScheme::fp8_block, 128, Round::nearest_even, false},
    {BlockScheme::fp8_block, 1, Round::nearest_even, true},
    {BlockScheme::fp8_block, 128, Round::nearest_even, true},
};
constexpr int64_t kShapes[][2] = {{1, 1},   {3, 17},  {17, 33}, {16, 16}, {33, 130},
                                  {130, 257}, {0, 7},  {7, 0},   {300, 200}};

TEST(BlockScaledFast, EqualsTheScalarReferenceOnRandomData) {
  uint32_t seed = 1;
  for (const Case& c : kCases)
    for (const auto& s : kShapes) {
      check(c, s[0], s[1], make_data(s[0] * s[1], seed++, false), "plain " + std::to_string(s[0]) + "x" + std::to_string(s[1]));
      if (::testing::Test::HasFatalFailure()) return;
    }
}

TEST(BlockScaledFast, EqualsTheScalarReferenceWithNanInfZerosAndSubnormals) {
  uint32_t seed = 100;
  for (const Case& c : kCases)
    for (const auto& s : kShapes) {
      Vec x = make_data(s[0] * s[1], seed++, true);
      check(c, s[0], s[1], x, "specials " + std::to_string(s[0]) + "x" + std::to_string(s[1]));
      if (::testing::Test::HasFatalFailure()) return;
      if (x.size() > 40) {  // and with infinities (they saturate every scale they touch)
        x[5] = std::numeric_limits<float>::infinity();
        x[x.size() - 3] = -std::numeric_limits<float>::infinity();
        check(c, s[0], s[1], x, "inf " + std::to_string(s[0]) + "x" + std::to_string(s[1]));
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
}

TEST(BlockScaledFast, RhtEqualsTheScalarLoopOnEveryTier) {
  const int64_t rows = 37, cols = 96;
  const Vec x = make_data(rows * cols, 7, false);
  // The definition (block_scaled.h): output j summed in fp32 in index order i = 0..15.
  Vec ref = x;
  for (size_t g = 0; g < ref.size(); g += 16)
    for (int j = 0; j < 16; ++j) {
      float acc = 0.0f;
      for (int i = 0; i < 16; ++i)
        acc += x[g + static_cast<size_t>(i)] * (rht16_sign(i) * ((std::popcount(static_cast<unsigned>(i & j)) & 1) ? -0.25f : 0.25f));
      ref[g + static_cast<size_t>(j)] = acc;
    }
  Vec fast = x;
  rht16_rows(fast, rows, cols);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_TRUE(same(fast[i], ref[i])) << i;
}

// Exact ties and thresholds on every tier: with a block amax of 6 (mxfp4: scale 1) or 448
// (fp8_block: scale 1) the values below are E2M1 / E4M3 midpoints (round to even), their
// neighbours one ulp away, signed zeros and E4M3 subnormal midpoints.
TEST(BlockScaledFast, EqualsTheScalarReferenceOnTies) {
  Vec e2{6.0f};
  for (float t : {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f})
    for (float v : {t, std::nextafter(t, 0.0f), std::nextafter(t, 7.0f)}) {
      e2.push_back(v);
      e2.push_back(-v);
    }
  e2.push_back(-0.0f);
  e2.push_back(0.0f);
  e2.resize(64, 0.1f);  // two mxfp4 blocks, each with the 6 first
  e2[32] = -6.0f;
  for (size_t i = 33; i < 64; ++i) e2[i] = -e2[i - 32];
  Vec e4{448.0f};
  for (float t : {1.0625f, 17.0f, 0.0009765625f, 0.0029296875f, 0.0146484375f, 416.0f + 16.0f})
    for (float v : {t, std::nextafter(t, 0.0f), std::nextafter(t, 500.0f)}) {
      e4.push_back(v);
      e4.push_back(-v);
    }
  e4.push_back(-0.0f);
  e4.resize(128, 3.0f);
  for (Round r : {Round::nearest_even, Round::stochastic}) {
    check({BlockScheme::mxfp4, 1, r, false}, 1, 64, e2, "ties");
    check({BlockScheme::nvfp4, 1, r, false}, 1, 64, e2, "ties");
  }
  check({BlockScheme::fp8_block, 1, Round::nearest_even, false}, 1, 128, e4, "ties");
}

// The column-wise operand: x^T (16 x 16 tiles by the tier's kernel, ragged edges), zero-padded to
// a multiple of 16 and transformed when rht.
TEST(BlockScaledFast, ColumnsIsTheTransposeZeroPaddedAndTransformed) {
  for (const auto& s : {std::array<int64_t, 2>{37, 50}, std::array<int64_t, 2>{64, 48},
                        std::array<int64_t, 2>{5, 3}}) {
    const int64_t rows = s[0], cols = s[1];
    const Vec x = make_data(rows * cols, 9, true);
    for (bool rht : {false, true}) {
      const int64_t rp = rht ? (rows + 15) / 16 * 16 : rows;
      Vec want(static_cast<size_t>(cols * rp), 0.0f);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) want[static_cast<size_t>(c * rp + r)] = x[static_cast<size_t>(r * cols + c)];
      if (rht) rht16_rows(want, cols, rp);
      Vec got(want.size(), 7.0f);
      block_scaled_columns(x, rows, cols, rht, got);
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_TRUE(same(got[i], want[i])) << rows << "x" << cols << " rht " << rht << " at " << i;
    }
  }
}

// fp8_block_columns_factors (the wgrad operand without a transpose, src/amp/block_linear.cpp):
// every bf16 value and tile scale equals block_scaled_fake_quantize_factors of the transpose,
// with ragged tiles (rows not a multiple of 128), specials and both scale kinds.
TEST(BlockScaledFast, Fp8ColumnsEqualTheRowQuantizerOfTheTranspose) {
  for (const auto& s : {std::array<int64_t, 2>{300, 70}, std::array<int64_t, 2>{256, 17},
                        std::array<int64_t, 2>{5, 3}}) {
    const int64_t rows = s[0], cols = s[1];
    const size_t n = static_cast<size_t>(rows * cols);
    for (bool pow2 : {false, true}) {
      const Vec x = make_data(rows * cols, 21, true);
      Vec xt(n);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) xt[static_cast<size_t>(c * rows + r)] = x[static_cast<size_t>(r * cols + c)];
      const BlockScaledOptions o{.scheme = BlockScheme::fp8_block, .tile_rows = 1, .pow2_scales = pow2};
      std::vector<uint16_t> want(n), got(n, 0x7777);
      const BlockScaledFactors fw = block_scaled_fake_quantize_factors(xt, cols, rows, o, want);
      const BlockScaledFactors fg = fp8_block_columns_factors(x, rows, cols, o, got);
      const int64_t gr = (rows + 127) / 128;
      ASSERT_EQ(fg.tile_scales.size(), fw.tile_scales.size());
      for (int64_t c = 0; c < cols; ++c) {
        for (int64_t r = 0; r < rows; ++r)
          ASSERT_EQ(got[static_cast<size_t>(r * cols + c)], want[static_cast<size_t>(c * rows + r)])
              << rows << "x" << cols << " pow2 " << pow2 << " at " << r << "," << c;
        for (int64_t t = 0; t < gr; ++t)
          ASSERT_TRUE(same(fg.tile_scales[static_cast<size_t>(t * cols + c)],
                           fw.tile_scales[static_cast<size_t>(c * gr + t)]));
      }
    }
  }
}

}  // namespace
}  // namespace mixp
