// The packed binary-act models' direct kernels (backend/lowbit_gemm.h): xnor_conv_sign_bits
// against the window sum written out, over channel counts that fill 32-bit words or not, output
// channels in and outside its blocks of 16, strides and padding; act_codes_u8 against the scalar
// formula on ties, signed zeros, the clamp and NaN; rescale_s32 against its formula with and
// without offsets and biases, on and off its tiles of 16.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "backend/cpu/act_codes.h"
#include "backend/cpu/lowbit_rescale.h"
#include "mixp/format/cpu_features.h"
#include "mixp/backend/lowbit_gemm.h"

namespace mixp {
namespace {

struct ConvCase {
  int64_t N, C, H, W, O, KS, stride, pad;
};

TEST(XnorConvSignBits, EqualsTheWindowSum) {
  std::mt19937 rng(11);
  const bool runs = simd_tier() == SimdTier::avx512 && cpu_features().avx512_vpopcntdq;
  for (const ConvCase& c : {ConvCase{2, 32, 14, 14, 64, 3, 1, 1}, ConvCase{1, 8, 9, 7, 16, 3, 1, 1},
                            ConvCase{2, 40, 6, 5, 80, 3, 2, 1}, ConvCase{1, 70, 5, 6, 12, 3, 1, 0},
                            ConvCase{3, 33, 4, 4, 17, 1, 1, 0}, ConvCase{1, 64, 7, 7, 130, 2, 2, 1},
                            ConvCase{1, 32, 8, 8, 48, 5, 1, 2}}) {
    SCOPED_TRACE(testing::Message() << "C " << c.C << " O " << c.O << " KS " << c.KS << " stride "
                                    << c.stride << " pad " << c.pad);
    const int64_t CW = (c.C + 63) / 64, OCW = (c.O + 63) / 64, K = c.C * c.KS * c.KS;
    const int64_t OH = (c.H + 2 * c.pad - c.KS) / c.stride + 1;
    const int64_t OW = (c.W + 2 * c.pad - c.KS) / c.stride + 1, P = OH * OW;
    std::bernoulli_distribution coin(0.5);
    std::vector<uint64_t> in(static_cast<size_t>(c.N * c.H * c.W * CW), 0);
    for (int64_t i = 0; i < c.N * c.H * c.W; ++i) {
      for (int64_t ch = 0; ch < c.C; ++ch) {
        if (coin(rng)) in[static_cast<size_t>(i * CW + ch / 64)] |= uint64_t{1} << (ch % 64);
      }
    }
    std::vector<int8_t> w(static_cast<size_t>(c.O * K));
    for (auto& v : w) v = coin(rng) ? -1 : 1;
    // A threshold row per output position near the sums, so that both signs occur.
    std::uniform_int_distribution<int32_t> d(-6, 6);
    std::vector<std::vector<int32_t>> thr_rows(static_cast<size_t>(P));
    std::vector<const int32_t*> thr(static_cast<size_t>(P));
    for (int64_t p = 0; p < P; ++p) {
      for (int64_t o = 0; o < c.O; ++o) thr_rows[size_t(p)].push_back(d(rng));
      thr[size_t(p)] = thr_rows[size_t(p)].data();
    }
    std::vector<uint64_t> flip(static_cast<size_t>(OCW), 0);
    for (int64_t o = 0; o < c.O; o += 3) flip[size_t(o / 64)] |= uint64_t{1} << (o % 64);

    std::vector<uint64_t> want(static_cast<size_t>(c.N * P * OCW), 0);
    for (int64_t n = 0; n < c.N; ++n) {
      for (int64_t p = 0; p < P; ++p) {
        const int64_t oh = p / OW, ow = p % OW;
        for (int64_t o = 0; o < c.O; ++o) {
          int32_t sum = 0;
          for (int64_t ch = 0; ch < c.C; ++ch) {
            for (int64_t kh = 0; kh < c.KS; ++kh) {
              for (int64_t kw = 0; kw < c.KS; ++kw) {
                const int64_t h = oh * c.stride - c.pad + kh, x = ow * c.stride - c.pad + kw;
                int32_t a = 1;  // padding reads +1
                if (h >= 0 && h < c.H && x >= 0 && x < c.W) {
                  const uint64_t word = in[size_t(((n * c.H + h) * c.W + x) * CW + ch / 64)];
                  a = (word >> (ch % 64)) & 1 ? -1 : 1;
                }
                sum += a * w[size_t(((o * c.C + ch) * c.KS + kh) * c.KS + kw)];
              }
            }
          }
          const bool neg =
              (sum < thr[size_t(p)][o]) != (((flip[size_t(o / 64)] >> (o % 64)) & 1) != 0);
          if (neg) want[size_t((n * P + p) * OCW + o / 64)] |= uint64_t{1} << (o % 64);
        }
      }
    }
    const XnorConvWeights pw = pack_xnor_conv_weights(w.data(), c.O, c.C, c.KS);
    std::vector<uint64_t> got(want.size(), 0x5a5a5a5a5a5a5a5aull);
    const std::vector<uint64_t> untouched = got;
    const bool ran = xnor_conv_sign_bits(got.data(), in.data(), pw, c.N, c.H, c.W, c.stride, c.pad,
                                         OH, OW, thr.data(), flip.data());
    EXPECT_EQ(ran, runs);
    EXPECT_EQ(got, ran ? want : untouched);
  }
}

float scalar_code(float v, float inv, float qmin, float qmax) {
  return std::clamp(std::nearbyint(v * inv), qmin, qmax);
}

TEST(ActCodes, EqualsTheScalarFormula) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-300.0f, 300.0f);
  std::vector<float> src = {0.5f,
                            1.5f,
                            2.5f,
                            -0.5f,
                            -1.5f,
                            -0.3f,
                            -0.0f,
                            0.0f,
                            127.5f,
                            -128.5f,
                            254.5f,
                            255.5f,
                            1e30f,
                            -1e30f,
                            8388609.0f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN()};
  for (int i = 0; i < 1000; ++i) src.push_back(u(rng));
  for (const auto& [inv, qmin, qmax, offset] :
       {std::tuple{1.0f, -128.0f, 127.0f, 128}, std::tuple{0.37f, 0.0f, 255.0f, 0},
        std::tuple{2.0f, 0.0f, 15.0f, 0}}) {
    std::vector<uint8_t> want(src.size());
    for (size_t i = 0; i < src.size(); ++i) {
      const float q = scalar_code(src[i], inv, qmin, qmax);
      want[i] = std::isnan(q) ? static_cast<uint8_t>(offset)  // x86: the cast gives INT_MIN
                              : static_cast<uint8_t>(static_cast<int>(q) + offset);
    }
    std::vector<float> fwant(src.size()), fgot(src.size(), 7.0f);
    for (size_t i = 0; i < src.size(); ++i) fwant[i] = scalar_code(src[i], inv, qmin, qmax);
    auto bits = [](const std::vector<float>& v) {  // NaN == NaN, -0 != +0
      std::vector<uint32_t> b(v.size());
      std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
      return b;
    };
    act_codes_f32(fgot.data(), src.data(), static_cast<int64_t>(src.size()), inv, qmin, qmax);
    EXPECT_EQ(bits(fgot), bits(fwant));
    if (cpu_features().use_avx512()) {
      std::fill(fgot.begin(), fgot.end(), 7.0f);
      cpu::codes::act_codes_f32_avx512(fgot.data(), src.data(), 17, inv, qmin, qmax);
      const std::vector<uint32_t> g = bits(fgot), w = bits(fwant);
      EXPECT_EQ(std::vector<uint32_t>(g.begin(), g.begin() + 17),
                std::vector<uint32_t>(w.begin(), w.begin() + 17));
      EXPECT_EQ(g[17], bits({7.0f})[0]);  // past n: untouched
    }
    for (const size_t n : {src.size(), size_t{15}, size_t{17}}) {
      std::vector<uint8_t> got(n, 0xAA);
      act_codes_u8(got.data(), src.data(), static_cast<int64_t>(n), inv, qmin, qmax, offset);
      EXPECT_EQ(got, std::vector<uint8_t>(want.begin(), want.begin() + static_cast<int64_t>(n)));
      if (cpu_features().use_avx512()) {
        std::fill(got.begin(), got.end(), 0xAA);
        cpu::codes::act_codes_u8_avx512(got.data(), src.data(), static_cast<int64_t>(n), inv, qmin,
                                        qmax, offset);
        EXPECT_EQ(got, std::vector<uint8_t>(want.begin(), want.begin() + static_cast<int64_t>(n)));
      }
    }
  }
}

TEST(RescaleS32, EqualsTheFormulaBitForBit) {
  std::mt19937 rng(9);
  std::uniform_int_distribution<int32_t> d(-300000, 300000);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (const int64_t P : {1, 15, 16, 17, 196}) {
    for (const int64_t O : {10, 16, 64, 70}) {
      for (const bool with_off : {false, true}) {
        SCOPED_TRACE(testing::Message() << "P " << P << " O " << O << " off " << with_off);
        const int64_t N = 2;
        std::vector<int32_t> acc(static_cast<size_t>(N * P * O)), off(static_cast<size_t>(O));
        std::vector<float> mult(static_cast<size_t>(O)), bias(static_cast<size_t>(O));
        for (auto& v : acc) v = d(rng);
        for (auto& v : off) v = d(rng) / 8;
        for (auto& v : mult) v = u(rng) * 1e-3f;
        for (auto& v : bias) v = u(rng);
        for (const float* b : std::array<const float*, 2>{nullptr, bias.data()}) {
          std::vector<float> want(acc.size());
          for (int64_t n = 0; n < N; ++n) {
            for (int64_t o = 0; o < O; ++o) {
              for (int64_t p = 0; p < P; ++p) {
                const int32_t a =
                    acc[size_t((n * P + p) * O + o)] - (with_off ? off[size_t(o)] : 0);
                const float y = static_cast<float>(a) * mult[size_t(o)];
                want[size_t((n * O + o) * P + p)] = b ? y + b[o] : y;
              }
            }
          }
          std::vector<float> got(want.size(), 7.0f);
          rescale_s32(got.data(), acc.data(), N, P, O, with_off ? off.data() : nullptr, mult.data(),
                      b);
          EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
          for (const auto tile : {&cpu::rescale::tile_generic, &cpu::rescale::tile_avx512}) {
            if (tile == &cpu::rescale::tile_avx512 && !cpu_features().use_avx512()) continue;
            std::fill(got.begin(), got.end(), 7.0f);
            for (int64_t n = 0; n < N; ++n) {
              for (int64_t p0 = 0; p0 < P; p0 += 16) {
                tile(got.data(), acc.data(), n, p0, std::min<int64_t>(16, P - p0), P, O,
                     with_off ? off.data() : nullptr, mult.data(), b);
              }
            }
            EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace mixp
