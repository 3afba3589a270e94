// Int8 inference: exact s32 convolution and GEMM against scalar loops; the fused requantizing
// Linear/Conv2d against the formula of int8_model.h (in double); save/load.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "mixp/backend/gemm.h"
#include "mixp/mixp.h"
#include "mixp/quant/int8_model.h"
#include "mixp/quant/qat.h"

namespace mixp::quant {
namespace {

// Activation codes in the range the CPU sums exactly: without VNNI, oneDNN adds u8 x s8 products
// in pairs into saturating int16, so codes stay within 7 bits there (what reduce_range is for;
// include/mixp/backend/gemm.h). Valgrind, which hides AVX-512, exercises that path too.
Tensor random_u8(const Shape& s, Generator& g, int hi = 256) {
  if (default_reduce_range()) hi = std::min(hi, 128);
  return randint(0, hi, s, g, {.dtype = DType::uint8});
}
Tensor random_s8(const Shape& s, Generator& g) {
  return randint(-128, 128, s, g, {.dtype = DType::int8});
}

// Scalar conv on NHWC u8 (zero padding) with OIHW s8 weights -> int64 sums.
std::vector<int64_t> ref_conv(const Tensor& x, const Tensor& w, int64_t stride, int64_t pad,
                              int64_t zp_x, int64_t* oh_out, int64_t* ow_out) {
  const int64_t N = x.size(0), H = x.size(1), W = x.size(2), C = x.size(3);
  const int64_t O = w.size(0), KH = w.size(2), KW = w.size(3);
  const int64_t OH = (H + 2 * pad - KH) / stride + 1, OW = (W + 2 * pad - KW) / stride + 1;
  *oh_out = OH;
  *ow_out = OW;
  const uint8_t* xs = x.data<uint8_t>();
  const int8_t* ws = w.data<int8_t>();
  std::vector<int64_t> out(static_cast<size_t>(N * OH * OW * O));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow)
        for (int64_t o = 0; o < O; ++o) {
          int64_t acc = 0;
          for (int64_t c = 0; c < C; ++c)
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t h = oh * stride - pad + kh, ww = ow * stride - pad + kw;
                // Padding stands for the real value 0, whose code is zp_x: (zp_x - zp_x) = 0.
                const int64_t xv = (h < 0 || h >= H || ww < 0 || ww >= W)
                                       ? 0
                                       : int64_t(xs[((n * H + h) * W + ww) * C + c]) - zp_x;
                acc += xv * ws[((o * C + c) * KH + kh) * KW + kw];
              }
          out[static_cast<size_t>(((n * OH + oh) * OW + ow) * O + o)] = acc;
        }
  return out;
}

TEST(Int8, ConvS32IsExact) {
  Generator g(1);
  for (const auto& [c, o, k, stride, pad] : std::vector<std::array<int64_t, 5>>{
           {1, 8, 3, 1, 1}, {16, 32, 3, 1, 1}, {5, 7, 3, 2, 0}, {32, 64, 1, 1, 0}}) {
    const Tensor x = random_u8({2, 9, 11, c}, g);
    const Tensor w = random_s8({o, c, k, k}, g);
    Conv2dParams p;
    p.stride_h = p.stride_w = stride;
    p.pad_h = p.pad_w = pad;
    const Tensor y = int8_conv2d_s32(x, w, p);
    int64_t OH, OW;
    const std::vector<int64_t> ref = ref_conv(x, w, stride, pad, 0, &OH, &OW);
    ASSERT_EQ(y.shape(), (Shape{2, OH, OW, o}));
    const int32_t* yv = y.data<int32_t>();
    for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(yv[i], ref[i]) << "c=" << c << " i=" << i;
  }
}

TEST(Int8, GemmU8S8IsExact) {
  Generator g(2);
  const Tensor a = random_u8({17, 300}, g);
  const Tensor b = random_s8({300, 23}, g);
  const Tensor y = gemm(a, b);
  for (int64_t i = 0; i < 17; ++i)
    for (int64_t j = 0; j < 23; ++j) {
      int64_t acc = 0;
      for (int64_t k = 0; k < 300; ++k)
        acc += int64_t(a.data<uint8_t>()[i * 300 + k]) * b.data<int8_t>()[k * 23 + j];
      ASSERT_EQ(y.data<int32_t>()[i * 23 + j], acc);
    }
}

// The requantization formula of int8_model.h in double.
int32_t requant(int64_t acc, double m, double b, bool relu, const std::optional<QParams>& out,
                double* fp_out) {
  double y = m * double(acc) + b;
  if (relu) y = std::max(y, 0.0);
  *fp_out = y;
  if (!out) return 0;
  const double q = out->zero_point + std::nearbyint(y / out->scale);
  return int32_t(std::clamp(q, double(out->qmin), double(out->qmax)));
}

struct LayerCase {
  QParams in;
  std::optional<QParams> out;
  bool relu;
};

std::vector<LayerCase> layer_cases() {
  return {
      {{0.02f, 0, 0, 255}, QParams{0.05f, 0, 0, 255}, true},       // ReLU group: zero points 0
      {{0.013f, 71, 0, 255}, QParams{0.04f, 130, 0, 255}, false},  // both zero points nonzero
      {{0.02f, 5, 0, 127}, std::nullopt, false},                   // reduce_range in, fp32 out
      {{0.03f, 17, 0, 255}, std::nullopt, true},
  };
}

// Checks the fused layer's output against the formula: fp32 outputs to 1e-5 relative, u8 codes
// within one step (the fp32 requantization may round a near-tie the other way), nearly all equal.
void check_outputs(const QAct& got, const std::vector<int64_t>& acc, int64_t O,
                   const std::vector<float>& ws, const std::vector<float>& bias,
                   const LayerCase& c) {
  int64_t differ = 0;
  for (size_t i = 0; i < acc.size(); ++i) {
    const size_t o = i % static_cast<size_t>(O);
    double fp;
    const int32_t q = requant(acc[i], double(c.in.scale) * ws[o], bias[o], c.relu, c.out, &fp);
    if (c.out) {
      const int32_t g = got.data.data<uint8_t>()[i];
      ASSERT_LE(std::abs(g - q), 1) << "i=" << i << " y=" << fp;
      differ += g != q;
    } else {
      ASSERT_NEAR(got.data.data<float>()[i], fp, 1e-5 * (std::abs(fp) + 1)) << "i=" << i;
    }
  }
  EXPECT_LE(differ, int64_t(acc.size()) / 200) << differ << " of " << acc.size() << " codes differ";
}

Int8WeightLayerParams weight_layer(const Tensor& w, Generator& g, const LayerCase& c) {
  const int64_t O = w.size(0);
  Int8WeightLayerParams p;
  p.name = "layer";
  p.weight = w;
  const std::vector<float> s = rand({O}, g).to_vector<float>();
  const std::vector<float> b = randn({O}, g).to_vector<float>();
  for (int64_t o = 0; o < O; ++o) {
    // Scales of both signs (a folded negative gamma makes them negative).
    p.weight_scale.push_back((o % 3 == 1 ? -1.0f : 1.0f) * (0.0005f + 0.002f * s[size_t(o)]));
    p.bias.push_back(b[size_t(o)]);
  }
  p.input = c.in;
  p.output = c.out;
  p.relu = c.relu;
  return p;
}

TEST(Int8, LinearMatchesFormula) {
  Generator g(3);
  for (const LayerCase& c : layer_cases()) {
    const int64_t M = 37, K = 200, O = 48;
    const Tensor w = random_s8({O, K}, g);
    Int8WeightLayerParams p = weight_layer(w, g, c);
    const std::vector<float> ws = p.weight_scale, bias = p.bias;
    Int8Linear layer(p);
    QAct in{random_u8({M, K}, g, c.in.qmax + 1), c.in};
    const QAct out = layer.forward(in);
    std::vector<int64_t> acc(static_cast<size_t>(M * O));
    for (int64_t i = 0; i < M; ++i)
      for (int64_t o = 0; o < O; ++o) {
        int64_t a = 0;
        for (int64_t k = 0; k < K; ++k)
          a += (int64_t(in.data.data<uint8_t>()[i * K + k]) - c.in.zero_point) *
               w.data<int8_t>()[o * K + k];
        acc[size_t(i * O + o)] = a;
      }
    check_outputs(out, acc, O, ws, bias, c);
  }
}

TEST(Int8, ConvMatchesFormula) {
  Generator g(4);
  for (const LayerCase& c : layer_cases()) {
    for (const auto& [C, O, stride, pad] :
         std::vector<std::array<int64_t, 4>>{{1, 16, 1, 1}, {8, 24, 1, 1}, {6, 16, 2, 0}}) {
      const Tensor w = random_s8({O, C, 3, 3}, g);
      Int8WeightLayerParams p = weight_layer(w, g, c);
      p.conv.stride_h = p.conv.stride_w = stride;
      p.conv.pad_h = p.conv.pad_w = pad;
      const std::vector<float> ws = p.weight_scale, bias = p.bias;
      Int8Conv2d layer(p);
      QAct in{random_u8({3, 10, 12, C}, g, c.in.qmax + 1), c.in};
      const QAct out = layer.forward(in);
      int64_t OH, OW;
      const std::vector<int64_t> acc = ref_conv(in.data, w, stride, pad, c.in.zero_point, &OH, &OW);
      ASSERT_EQ(out.data.numel(), int64_t(acc.size()));
      if (!c.out) {
        // fp32 outputs are NCHW: compare in NHWC order.
        QAct nhwc{out.data.permute({0, 2, 3, 1}).contiguous(), {}};
        check_outputs(nhwc, acc, O, ws, bias, c);
      } else {
        check_outputs(out, acc, O, ws, bias, c);
      }
    }
  }
}

TEST(Int8, RejectsMismatchedInputParameters) {
  Generator g(5);
  const LayerCase c = layer_cases()[0];
  Int8Linear layer(weight_layer(random_s8({4, 8}, g), g, c));
  QAct wrong{random_u8({2, 8}, g), QParams{0.5f, 3, 0, 255}};
  EXPECT_THROW(layer.forward(wrong), std::invalid_argument);
}

}  // namespace
}  // namespace mixp::quant
