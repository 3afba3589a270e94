// int8 observer arithmetic and fake quantization against hand-computed cases. Each expected
// scale/zero point is worked out from the formula in docs/formats.md; the values were also checked
// against PyTorch 1.13 (MinMaxObserver / PerChannelMinMaxObserver.calculate_qparams,
// torch.quantize_per_tensor), whose printed results are quoted in the comments.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "mixp/format/block_int8.h"

namespace mixp {
namespace {

constexpr Int8Config kSymQ{QDType::qint8, QScheme::symmetric, false};
constexpr Int8Config kAffQ{QDType::qint8, QScheme::affine, false};
constexpr Int8Config kSymU{QDType::quint8, QScheme::symmetric, false};
constexpr Int8Config kAffU{QDType::quint8, QScheme::affine, false};

TEST(Int8Range, Ranges) {
  EXPECT_EQ(quant_range(QDType::qint8, false).qmin, -128);
  EXPECT_EQ(quant_range(QDType::qint8, false).qmax, 127);
  EXPECT_EQ(quant_range(QDType::qint8, true).qmin, -64);
  EXPECT_EQ(quant_range(QDType::qint8, true).qmax, 63);
  EXPECT_EQ(quant_range(QDType::quint8, false).qmax, 255);
  EXPECT_EQ(quant_range(QDType::quint8, true).qmin, 0);
  EXPECT_EQ(quant_range(QDType::quint8, true).qmax, 127);
}

TEST(Int8QParams, Symmetric) {
  // [-1, 3]: max(1, 3) / (255 / 2) = 3 / 127.5 in fp32 (torch: 0.0235294122248888, zp 0).
  QParams p = compute_qparams(-1.0f, 3.0f, kSymQ);
  EXPECT_EQ(p.scale, 3.0f / 127.5f);
  EXPECT_EQ(p.scale, 0.0235294122248888f);
  EXPECT_EQ(p.zero_point, 0);
  EXPECT_EQ(p.qmin, -128);
  // The negative side can dominate; a positive-only range still includes 0.
  EXPECT_EQ(compute_qparams(-255.0f, 1.0f, kSymQ).scale, 2.0f);
  EXPECT_EQ(compute_qparams(2.0f, 127.5f, kSymQ).scale, 1.0f);
  // quint8 symmetric: zero point 128 ([-1, 127.5] -> scale 1, zp 128).
  p = compute_qparams(-1.0f, 127.5f, kSymU);
  EXPECT_EQ(p.scale, 1.0f);
  EXPECT_EQ(p.zero_point, 128);
  EXPECT_EQ(p.qmax, 255);
}

TEST(Int8QParams, Affine) {
  // [-1, 3]: scale 4/255 (torch 0.01568627543747425); zp = -128 - round(-1 / scale)
  // = -128 - round(-63.75) = -128 + 64 = -64.
  QParams p = compute_qparams(-1.0f, 3.0f, kAffQ);
  EXPECT_EQ(p.scale, 4.0f / 255.0f);
  EXPECT_EQ(p.scale, 0.01568627543747425f);
  EXPECT_EQ(p.zero_point, -64);
  // A tie in the zero point: [-2.5, 252.5] has scale 1 and min/scale = -2.5, which rounds half
  // to even (-2), not away (-3): qint8 zp -128 + 2 = -126, quint8 zp 0 + 2 = 2 (torch agrees).
  p = compute_qparams(-2.5f, 252.5f, kAffQ);
  EXPECT_EQ(p.scale, 1.0f);
  EXPECT_EQ(p.zero_point, -126);
  p = compute_qparams(-2.5f, 252.5f, kAffU);
  EXPECT_EQ(p.zero_point, 2);
  // [-0.3, 0.7] quint8: scale 1/255 (torch 0.003921568859368563), zp 76.
  p = compute_qparams(-0.3f, 0.7f, kAffU);
  EXPECT_EQ(p.scale, 1.0f / 255.0f);
  EXPECT_EQ(p.zero_point, 76);
  // All-negative range: zp lands on qmax.
  p = compute_qparams(-255.0f, -1.0f, kAffQ);
  EXPECT_EQ(p.scale, 1.0f);
  EXPECT_EQ(p.zero_point, 127);
}

TEST(Int8QParams, ReduceRange) {
  // qint8 [-64, 63]: symmetric denominator 127 / 2 = 63.5.
  QParams p = compute_qparams(-63.5f, 1.0f, {QDType::qint8, QScheme::symmetric, true});
  EXPECT_EQ(p.scale, 1.0f);
  EXPECT_EQ(p.qmin, -64);
  EXPECT_EQ(p.qmax, 63);
  // quint8 [0, 127] affine: [-27, 100] -> scale 127 / 127 = 1, zp = 0 - round(-27) = 27.
  p = compute_qparams(-27.0f, 100.0f, {QDType::quint8, QScheme::affine, true});
  EXPECT_EQ(p.scale, 1.0f);
  EXPECT_EQ(p.zero_point, 27);
  EXPECT_EQ(p.qmax, 127);
  // PyTorch refuses symmetric quint8 with reduce_range; so do we, saying what to use instead.
  try {
    compute_qparams(-1.0f, 1.0f, {QDType::quint8, QScheme::symmetric, true});
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("affine"), std::string::npos) << e.what();
  }
}

TEST(Int8QParams, ScaleFlooredAtFp32Epsilon) {
  // All zeros: scale 2^-23; affine zp = qmin - round(0) (torch: -128 for qint8, 0 for quint8).
  EXPECT_EQ(compute_qparams(0.0f, 0.0f, kSymQ).scale, 0x1p-23f);
  EXPECT_EQ(compute_qparams(0.0f, 0.0f, kSymQ).zero_point, 0);
  EXPECT_EQ(compute_qparams(0.0f, 0.0f, kAffQ).scale, 0x1p-23f);
  EXPECT_EQ(compute_qparams(0.0f, 0.0f, kAffQ).zero_point, -128);
  EXPECT_EQ(compute_qparams(0.0f, 0.0f, kAffU).zero_point, 0);
  // 1e-6 / 127.5 < 2^-23 -> 2^-23; just above the floor it is kept.
  EXPECT_EQ(compute_qparams(0.0f, 1e-6f, kSymQ).scale, 0x1p-23f);
  const float above = 127.5f * 0x1p-22f;
  EXPECT_EQ(compute_qparams(0.0f, above, kSymQ).scale, 0x1p-22f);
  // The zero point uses the floored scale: min -1e-7 -> -1e-7 * 2^23 = -0.84 -> -1 -> zp -127.
  EXPECT_EQ(compute_qparams(-1e-7f, 0.0f, kAffQ).zero_point, -127);
}

TEST(Int8QParams, EmptyAndInvalidInput) {
  const float inf = std::numeric_limits<float>::infinity();
  const MinMax mm = tensor_minmax({});
  EXPECT_EQ(mm.min, inf);
  EXPECT_EQ(mm.max, -inf);
  const QParams p = compute_qparams(mm.min, mm.max, kAffU);  // PyTorch: scale 1, zp 0
  EXPECT_EQ(p.scale, 1.0f);
  EXPECT_EQ(p.zero_point, 0);
  EXPECT_THROW(compute_qparams(-inf, 1.0f, kSymQ), std::invalid_argument);
  EXPECT_THROW(compute_qparams(std::nanf(""), 1.0f, kSymQ), std::invalid_argument);
  EXPECT_THROW(compute_qparams(2.0f, 1.0f, kSymQ), std::invalid_argument);
  const std::vector<float> with_nan = {1.0f, std::nanf(""), 2.0f};
  EXPECT_TRUE(std::isnan(tensor_minmax(with_nan).min));
}

TEST(Int8Quantize, NearbyintTiesToEven) {
  // scale 1, zp 0: torch.quantize_per_tensor([.5, 1.5, 2.5, -.5, -1.5, -2.5, 127.5, 200, -300])
  // = [0, 2, 2, 0, -2, -2, 127, 127, -128].
  const QParams p{1.0f, 0, -128, 127};
  const std::vector<float> x = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 127.5f, 200.0f, -300.0f};
  const std::vector<int32_t> want = {0, 2, 2, 0, -2, -2, 127, 127, -128};
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(quantize_int8_value(x[i], p, Round::nearest_even, 0), want[i]) << x[i];
  }
  // quint8 with zp 128: -0.5 -> 128 + 0, 0.5 -> 128, 1.5 -> 130, -129.5 -> -2 -> clamped 0.
  const QParams u{1.0f, 128, 0, 255};
  EXPECT_EQ(quantize_int8_value(-0.5f, u, Round::nearest_even, 0), 128);
  EXPECT_EQ(quantize_int8_value(1.5f, u, Round::nearest_even, 0), 130);
  EXPECT_EQ(quantize_int8_value(-129.5f, u, Round::nearest_even, 0), 0);
  // Other modes on request.
  EXPECT_EQ(quantize_int8_value(2.5f, p, Round::nearest_away, 0), 3);
  EXPECT_EQ(quantize_int8_value(-2.7f, p, Round::toward_zero, 0), -2);
}

TEST(Int8Quantize, MultipliesByTheFp32Reciprocal) {
  // PyTorch computes x * (1/scale) in fp32, not x / scale. With scale 0.7 and
  // x = fp32(-121.5 * 0.7) = -0x1.543332p+6: x * fp32(1/0.7) = -121.5 exactly -> -122 (tie to
  // even), while x / 0.7 = -121.49999 would give -121. torch.quantize_per_tensor gives -122.
  const QParams p{0.7f, 0, -128, 127};
  const float x = -0x1.543332p+6f;
  EXPECT_EQ(quantize_int8_value(x, p, Round::nearest_even, 0), -122);
  bool in = false;
  EXPECT_EQ(fake_quantize_int8_value(x, p, &in), -122.0f * 0.7f);
  EXPECT_TRUE(in);
}

TEST(Int8Quantize, DequantizeAndStoredBytes) {
  const QParams q{0.5f, -3, -128, 127};
  std::vector<uint8_t> bytes(4);
  quantize_int8(bytes, std::vector<float>{0.0f, 1.0f, -64.0f, 100.0f}, q, Round::nearest_even, 0);
  // q = -3 + round(x * 2): -3, -1, -131 -> -128, 197 -> 127; two's complement bytes.
  EXPECT_EQ(bytes, (std::vector<uint8_t>{0xFD, 0xFF, 0x80, 0x7F}));
  std::vector<float> back(4);
  dequantize_int8(back, bytes, q);
  EXPECT_EQ(back, (std::vector<float>{0.0f, 1.0f, -62.5f, 65.0f}));  // (q + 3) * 0.5
  // quint8 bytes are unsigned.
  const QParams u{1.0f, 128, 0, 255};
  quantize_int8(bytes, std::vector<float>{0.0f, 127.0f, -128.0f, 1000.0f}, u, Round::nearest_even,
                0);
  EXPECT_EQ(bytes, (std::vector<uint8_t>{128, 255, 0, 255}));
  // NaN cannot be stored.
  try {
    quantize_int8(bytes, std::vector<float>{0.0f, 1.0f, std::nanf(""), 2.0f}, q,
                  Round::nearest_even, 0);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("value 2 is NaN"), std::string::npos) << e.what();
  }
  // Bad parameters are refused with the reason.
  EXPECT_THROW(quantize_int8(bytes, std::vector<float>(4), QParams{0.0f, 0, -128, 127},
                             Round::nearest_even, 0),
               std::invalid_argument);
  EXPECT_THROW(dequantize_int8(back, bytes, QParams{1.0f, 300, 0, 255}), std::invalid_argument);
}

TEST(Int8FakeQuantize, StraightThroughMaskAndSpecials) {
  // scale 1, zp 0, [-128, 127]: 127.4 -> 127 in range; 127.6 -> 128 out (clamped to 127);
  // -128.5 -> -128 (tie to even) in range; NaN stays NaN with mask 0; inf saturates, mask 0.
  const QParams p{1.0f, 0, -128, 127};
  std::vector<float> x = {
      127.4f, 127.6f, -128.5f, std::nanf(""), std::numeric_limits<float>::infinity(), -3.2f};
  std::vector<uint8_t> mask(x.size());
  fake_quantize_int8(x, p, mask);
  EXPECT_EQ(x[0], 127.0f);
  EXPECT_EQ(x[1], 127.0f);
  EXPECT_EQ(x[2], -128.0f);
  EXPECT_TRUE(std::isnan(x[3]));
  EXPECT_EQ(x[4], 127.0f);
  EXPECT_EQ(x[5], -3.0f);
  EXPECT_EQ(mask, (std::vector<uint8_t>{1, 0, 1, 0, 0, 1}));
}

TEST(Int8Stochastic, ReproducibleAndUnbiased) {
  // x = 0.25 with scale 1: q is 1 with probability 0.25.
  const QParams p{1.0f, 0, -128, 127};
  std::vector<float> x(40000, 0.25f);
  std::vector<uint8_t> a(x.size()), b(x.size());
  quantize_int8(a, x, p, Round::stochastic, 5);
  quantize_int8(b, x, p, Round::stochastic, 5);
  EXPECT_EQ(a, b);
  double ones = 0;
  for (uint8_t v : a) {
    ASSERT_TRUE(v == 0 || v == 1);
    ones += v;
  }
  EXPECT_NEAR(ones / x.size(), 0.25, 0.01);
}

TEST(Int8PerChannel, Axis0And1) {
  // [[-1, 0.5, 2], [0.1, -4, 3]]
  const std::vector<float> x = {-1.0f, 0.5f, 2.0f, 0.1f, -4.0f, 3.0f};
  const std::vector<int64_t> shape = {2, 3};
  // Axis 0 symmetric qint8: channel amax 2 and 4 -> scales 2/127.5, 4/127.5 (torch: [0.0157,
  // 0.0314], zp [0, 0]).
  auto mm = channel_minmax(x, shape, 0);
  ASSERT_EQ(mm.size(), 2u);
  EXPECT_EQ(mm[1].min, -4.0f);
  EXPECT_EQ(mm[1].max, 3.0f);
  auto p = compute_qparams_per_channel(mm, kSymQ);
  EXPECT_EQ(p[0].scale, 2.0f / 127.5f);
  EXPECT_EQ(p[1].scale, 4.0f / 127.5f);
  std::vector<uint8_t> q(6);
  quantize_int8_per_channel(q, x, shape, 0, p, Round::nearest_even, 0);
  // 1/scale in fp32 is 63.749996 and 31.874998 (not 63.75, 31.875): -1 -> -63.749996 -> -64;
  // 0.5 -> 31.874998 -> 32; 2 -> 127.49999 -> 127; 0.1 -> 3.1874998 -> 3; -4 -> -127.49999 ->
  // -127 (with exact division it would be a tie, -128); 3 -> 95.62499 -> 96.
  // torch.quantize_per_channel gives [[-64, 32, 127], [3, -127, 96]].
  const std::vector<int8_t> want = {-64, 32, 127, 3, -127, 96};
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(static_cast<int8_t>(q[i]), want[i]) << i;
  std::vector<float> back(6);
  dequantize_int8_per_channel(back, q, shape, 0, p);
  EXPECT_EQ(back[4], -127.0f * p[1].scale);
  // Axis 1 (= -1) affine quint8: columns [-1, 0.1], [0.5, -4], [2, 3] -> torch scales
  // [0.004313725512474775, 0.01764705963432789, 0.0117647061124444], zp [232, 227, 0].
  mm = channel_minmax(x, shape, -1);
  p = compute_qparams_per_channel(mm, kAffU);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].scale, 0.004313725512474775f);
  EXPECT_EQ(p[1].scale, 0.01764705963432789f);
  EXPECT_EQ(p[2].scale, 0.0117647061124444f);
  EXPECT_EQ(p[0].zero_point, 232);
  EXPECT_EQ(p[1].zero_point, 227);
  EXPECT_EQ(p[2].zero_point, 0);
  auto y = x;
  fake_quantize_int8_per_channel(y, shape, 1, p, {});
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(y[i], fake_quantize_int8_value(x[i], p[i % 3], nullptr)) << i;
  }
}

TEST(Int8PerChannel, ShapeErrors) {
  const std::vector<float> x(6);
  std::vector<uint8_t> q(6);
  const std::vector<QParams> p(2);
  EXPECT_THROW(
      quantize_int8_per_channel(q, x, std::vector<int64_t>{2, 3}, 2, p, Round::nearest_even, 0),
      std::invalid_argument);  // axis out of range
  EXPECT_THROW(
      quantize_int8_per_channel(q, x, std::vector<int64_t>{3, 2}, 0, p, Round::nearest_even, 0),
      std::invalid_argument);  // 2 parameters for 3 channels
  EXPECT_THROW(
      quantize_int8_per_channel(q, x, std::vector<int64_t>{2, 2}, 0, p, Round::nearest_even, 0),
      std::invalid_argument);  // shape holds 4 values, buffer 6
  EXPECT_NO_THROW(
      quantize_int8_per_channel(q, x, std::vector<int64_t>{3, 2}, 1, p, Round::nearest_even, 0));
}

}  // namespace
}  // namespace mixp
