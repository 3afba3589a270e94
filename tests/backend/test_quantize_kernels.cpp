// The cpu backend's scaling and quantization kernels (src/backend/cpu/cpu_quantize.cpp, the tiered
// loops of fp8_kernels.h and qkernels.h) against the ref backend's scalar loops over the format
// module's reference codecs (src/backend/ref/ref_quantize.cpp), bit for bit (NaN matches NaN).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/cpu/fp8_kernels.h"
#include "backend/kernel_compare.h"
#include "mixp/backend/backend.h"
#include "mixp/format/cpu_features.h"
#include "mixp/tensor/factories.h"

namespace mixp {
namespace {

Backend& ref() {
  return test::ref_backend();
}
Backend& cpu() {
  return test::cpu_backend();
}

// Values over many binades (subnormal fp8 up to beyond the fp8 maxima), signed zeros, ties of the
// fp8 grids, and inf/NaN; above the cpu backend's parallel grain.
Tensor values(const Shape& shape, uint64_t seed, bool nonfinite = true) {
  Generator gen(seed);
  Tensor t = randn(shape, gen);
  std::vector<float> v = t.to_vector<float>();
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::ldexp(v[i], static_cast<int>(i % 48) - 24);
  v[0] = 0.0f;
  v[1] = -0.0f;
  v[2] = 1.0625f;  // an E4M3 tie (between 1 and 1.125)
  v[4] = 5e4f;     // beyond E4M3's max
  if (nonfinite) {
    v[6] = std::numeric_limits<float>::infinity();
    v[9] = -std::numeric_limits<float>::infinity();
    v[12] = std::numeric_limits<float>::quiet_NaN();
  }
  return from_vector(v, shape);
}

// Equal as values of their dtype, NaN equal to NaN (payloads may differ).
void expect_same(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  ASSERT_EQ(x.size(), y.size());
  int64_t bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const bool same = (std::isnan(x[i]) && std::isnan(y[i])) ||
                      (x[i] == y[i] && std::signbit(x[i]) == std::signbit(y[i]));
    if (!same && bad++ < 5)
      ADD_FAILURE() << "element " << i << ": cpu " << x[i] << ", ref " << y[i];
  }
  EXPECT_EQ(bad, 0);
}

TEST(QuantizeKernels, AmaxMatchesRef) {
  for (bool nonfinite : {false, true}) {
    const Tensor x = values({70001}, 1, nonfinite);
    Tensor a = zeros({1}), b = zeros({1});
    cpu().amax(a, x);
    ref().amax(b, x);
    EXPECT_EQ(a.item(), b.item());
  }
}

TEST(QuantizeKernels, Fp8PerTensorMatchesRef) {
  const Tensor x = values({70001}, 2);
  for (DType f : {DType::fp8_e4m3, DType::fp8_e5m2}) {
    for (float scale : {1.0f, 0.01f, 300.0f}) {
      SCOPED_TRACE(std::string(name(f)) + " scale " + std::to_string(scale));
      Tensor a = Tensor::empty({70001}, {.dtype = DType::bf16}), b = a.clone();
      Tensor aa = zeros({1}), ab = zeros({1});
      const QuantizeSpec s{.kind = QuantizeSpec::Kind::fp8_tensor, .format = f, .scale = scale};
      cpu().quantize(s, a, aa, x);
      ref().quantize(s, b, ab, x);
      expect_same(a, b);
      EXPECT_EQ(aa.item(), ab.item());
    }
  }
}

TEST(QuantizeKernels, MxBlocksMatchRef) {
  for (int64_t row : {int64_t{96}, int64_t{70}}) {  // whole and partial blocks
    const Tensor x = values({1000, row}, 3);
    for (DType f : {DType::fp8_e4m3, DType::fp8_e5m2}) {
      SCOPED_TRACE(std::string(name(f)) + " row " + std::to_string(row));
      Tensor a = Tensor::empty(x.shape(), {.dtype = DType::bf16}), b = a.clone(), none;
      const QuantizeSpec s{.kind = QuantizeSpec::Kind::fp8_mx, .format = f, .block = 32};
      cpu().quantize(s, a, none, x);
      ref().quantize(s, b, none, x);
      expect_same(a, b);
    }
  }
}

// MX blocks down the columns (QuantizeSpec::along_columns, amp::mxfp8_column_blocks): every
// tier's kernel, through the cpu backend and directly, against the ref backend (the rows of the
// transpose through the reference quantizer): partial row blocks, column tails, a block above
// the kernel's largest (the ref path), blocks whose scale clamps at 2^-127, NaN and inf.
TEST(QuantizeKernels, MxColumnBlocksMatchRef) {
  for (const auto& [R, C] : {std::pair<int64_t, int64_t>{1000, 96}, {70, 37}, {33, 17}}) {
    Tensor x = values({R, C}, 7);
    {
      std::vector<float> v = x.to_vector<float>();
      for (int64_t r = 0; r < std::min<int64_t>(R, 40); ++r)  // column 3: fp32 subnormals
        v[static_cast<size_t>(r * C + 3)] = std::ldexp(static_cast<float>(r + 1), -145);
      x = from_vector(v, {R, C});
    }
    for (DType f : {DType::fp8_e4m3, DType::fp8_e5m2}) {
      for (int block : {32, 16, 300}) {
        SCOPED_TRACE(::testing::Message() << R << "x" << C << " " << name(f) << " block " << block);
        const QuantizeSpec s{
            .kind = QuantizeSpec::Kind::fp8_mx, .format = f, .block = block, .along_columns = true};
        Tensor a = Tensor::empty(x.shape(), {.dtype = DType::bf16}), b = a.clone(), none;
        cpu().quantize(s, a, none, x);
        ref().quantize(s, b, none, x);
        expect_same(a, b);
        if (block > cpu::fp8k::kMaxColumnBlock) continue;
        for (const cpu::fp8k::Kernels* k :
             {&cpu::fp8k::kernels_generic(), &cpu::fp8k::kernels_avx2(),
              &cpu::fp8k::kernels_avx512()}) {
          if ((k == &cpu::fp8k::kernels_avx512() && !cpu_features().use_avx512()) ||
              (k == &cpu::fp8k::kernels_avx2() && !cpu_features().use_avx2()))
            continue;
          SCOPED_TRACE(k->tier);
          Tensor c = Tensor::empty(x.shape(), {.dtype = DType::bf16});
          k->mx_cast_bf16_columns(static_cast<const float*>(x.data_ptr()), R, C, C, block,
                                  f == DType::fp8_e5m2, static_cast<uint16_t*>(c.data_ptr()));
          expect_same(c, b);
        }
      }
    }
  }
}

TEST(QuantizeKernels, IntFakeQuantizeAndMaskMatchRef) {
  const Tensor x = values({40, 3, 600}, 4);
  const std::vector<QuantizeSpec::IntParams> per_tensor{
      {0.02f, 1.0f / 0.02f, 0.0f, -128.0f, 127.0f}};
  const std::vector<QuantizeSpec::IntParams> per_channel{
      {0.5f, 2.0f, 3.0f, 0.0f, 255.0f},
      {1e-3f, 1.0f / 1e-3f, 0.0f, -127.0f, 127.0f},
      {0.1f, 10.0f, -7.0f, -8.0f, 7.0f}};
  for (const auto& [params, channels, inner] :
       {std::tuple{&per_tensor, int64_t{1}, x.numel()},
        std::tuple{&per_channel, int64_t{3}, int64_t{600}}}) {
    SCOPED_TRACE(channels == 1 ? "per tensor" : "per channel");
    const QuantizeSpec s{.kind = QuantizeSpec::Kind::int_fake,
                         .params = *params,
                         .channels = channels,
                         .inner = inner};
    Tensor a = Tensor::empty(x.shape()), b = a.clone();
    Tensor ma = Tensor::empty(x.shape(), {.dtype = DType::uint8}), mb = ma.clone();
    cpu().quantize(s, a, ma, x);
    ref().quantize(s, b, mb, x);
    expect_same(a, b);
    EXPECT_EQ(ma.to_vector<int64_t>(), mb.to_vector<int64_t>());
    // The straight-through gradient with that mask, and a ReLU's from its output.
    const Tensor g = values(x.shape(), 5);
    Tensor ga = Tensor::empty(x.shape()), gb = ga.clone();
    cpu().mask_grad(ga, g, ma);
    ref().mask_grad(gb, g, ma);
    expect_same(ga, gb);
    cpu().mask_grad(ga, g, x);
    ref().mask_grad(gb, g, x);
    expect_same(ga, gb);
  }
}

TEST(QuantizeKernels, MinMaxMatchesRef) {
  for (bool nonfinite : {false, true}) {
    const Tensor x = values({30, 4, 700}, 6, nonfinite);
    for (int64_t channels : {int64_t{1}, int64_t{4}}) {
      const int64_t inner = channels == 1 ? x.numel() : 700;
      Tensor a0 = zeros({channels}), a1 = zeros({channels}), b0 = zeros({channels}),
             b1 = zeros({channels});
      cpu().minmax(a0, a1, x, channels, inner);
      ref().minmax(b0, b1, x, channels, inner);
      expect_same(a0, b0);
      expect_same(a1, b1);
    }
  }
}

// With a bias the AVX2/AVX-512 tiers fuse the multiply-add, as ref does (backend.h).
TEST(QuantizeKernels, ScaleBiasActMatchesRef) {
  if (simd_tier() == SimdTier::scalar) GTEST_SKIP() << "the baseline tier rounds twice";
  const Tensor x = values({300, 70}, 7), bias = values({70}, 8, false);
  for (Activation act : {Activation::none, Activation::relu}) {
    for (bool with_bias : {false, true}) {
      Tensor a = Tensor::empty(x.shape()), b = a.clone();
      const Tensor bb = with_bias ? bias : Tensor();
      cpu().scale_bias_act(a, x, bb, 0.3f, act);
      ref().scale_bias_act(b, x, bb, 0.3f, act);
      expect_same(a, b);
    }
  }
}

}  // namespace
}  // namespace mixp
