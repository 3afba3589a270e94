// Fake quantization: the vectorized op against block_int8's scalar reference (ties, clamping edges,
// NaN/inf), hand-computed cases, torch 1.13's fake_quantize_per_tensor_affine (values and
// straight-through gradient), per-channel, and the FakeQuantize module.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "backend/cpu/qkernels.h"
#include "mixp/mixp.h"
#include "mixp/quant/fake_quantize.h"
#include "quant_test_util.h"

namespace mixp::quant {
namespace {

using testing::fixture;
using testing::floats;

// y and dy/dx (with dL/dy = 1) of the op.
std::pair<std::vector<float>, std::vector<float>> run_op(const std::vector<float>& x,
                                                         const QParams& p) {
  Tensor t = from_vector(x, Shape{static_cast<int64_t>(x.size())}).requires_grad_();
  Tensor y = fake_quantize(t, p);
  sum(y).backward();
  return {y.to_vector<float>(), t.grad().to_vector<float>()};
}

TEST(FakeQuantize, HandComputedTiesAndEdges) {
  // scale 0.25 (a power of two: every product below is exact), zero point 10, quint8 [0, 255].
  const QParams p{0.25f, 10, 0, 255};
  struct Case {
    float x, y, grad;
  };
  const Case cases[] = {
      {0.125f, 0.0f, 1},     // v = 0.5: tie to even 0 -> q = 10
      {0.375f, 0.5f, 1},     // 1.5 -> 2
      {0.625f, 0.5f, 1},     // 2.5 -> 2
      {-0.125f, 0.0f, 1},    // -0.5 -> -0
      {61.25f, 61.25f, 1},   // q = 255 exactly: in range
      {61.375f, 61.25f, 0},  // 245.5 -> 246: q = 256 > qmax, clamped, no gradient
      {61.37f, 61.25f, 1},   // 245.48 -> 245: q = 255
      {-2.5f, -2.5f, 1},     // q = 0 = qmin
      {-2.625f, -2.5f, 1},   // -10.5 -> -10 (even): q = 0, in range
      {-2.875f, -2.5f, 0},   // -11.5 -> -12: q = -2 < qmin
      {1e30f, 61.25f, 0},    // far out: saturates
      {-1e30f, -2.5f, 0},
  };
  std::vector<float> x;
  for (const Case& c : cases) x.push_back(c.x);
  const auto [y, g] = run_op(x, p);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(y[i], cases[i].y) << "x = " << x[i];
    EXPECT_EQ(g[i], cases[i].grad) << "x = " << x[i];
  }
}

TEST(FakeQuantize, NanAndInf) {
  const QParams p{0.1f, 0, -128, 127};
  const float inf = std::numeric_limits<float>::infinity();
  const auto [y, g] = run_op({std::nanf(""), inf, -inf}, p);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], 127 * 0.1f);
  EXPECT_EQ(y[2], -128 * 0.1f);
  EXPECT_EQ(g[0], 0.0f);
  EXPECT_EQ(g[1], 0.0f);
  EXPECT_EQ(g[2], 0.0f);
}

// The vectorized kernels (both tiers) against the scalar reference over random values, all ties
// and the ends of several ranges.
TEST(FakeQuantize, KernelsMatchScalarReference) {
  const QParams params[] = {{0.0173f, 37, 0, 255}, {0.05f, 0, 0, 127},     {0.0031f, 0, -128, 127},
                            {0.25f, 3, -64, 63},   {3.0e-5f, 128, 0, 255}, {1.0f, 0, -128, 127}};
  Generator gen(7);
  for (const QParams& p : params) {
    std::vector<float> x = randn({4000}, gen).mul_(p.scale * 150).to_vector<float>();
    for (int k = p.qmin - p.zero_point - 3; k <= p.qmax - p.zero_point + 3; ++k) {
      x.push_back((static_cast<float>(k) + 0.5f) * p.scale);  // ties (as fp32 products allow)
      x.push_back(static_cast<float>(k) * p.scale);
      x.push_back(std::nextafter((static_cast<float>(k) + 0.5f) * p.scale, 1e30f));
    }
    for (const cpu::qk::Kernels* k :
         {&cpu::qk::kernels_generic(), &cpu::qk::kernels_avx2(), &cpu::qk::kernels_avx512()}) {
      if (k == &cpu::qk::kernels_avx512() && simd_tier() != SimdTier::avx512) continue;
      if (k == &cpu::qk::kernels_avx2() && simd_tier() == SimdTier::scalar) continue;
      std::vector<float> y(x.size());
      std::vector<uint8_t> mask(x.size());
      k->fake_quant(y.data(), mask.data(), x.data(), static_cast<int64_t>(x.size()),
                    {p.scale, 1.0f / p.scale, float(p.zero_point), float(p.qmin), float(p.qmax)});
      for (size_t i = 0; i < x.size(); ++i) {
        bool in = false;
        const float ref = fake_quantize_int8_value(x[i], p, &in);
        ASSERT_EQ(y[i], ref) << k->tier << " x = " << x[i] << " scale " << p.scale;
        ASSERT_EQ(mask[i] != 0, in) << k->tier << " x = " << x[i];
      }
    }
  }
}

TEST(FakeQuantize, MatchesTorchFixture) {
  for (const auto& c : fixture()["fake_quant"]) {
    const QParams p{static_cast<float>(c["scale"].get<double>()), c["zero_point"].get<int32_t>(),
                    c["qmin"].get<int32_t>(), c["qmax"].get<int32_t>()};
    const std::vector<float> x = floats(c["x"]), ey = floats(c["y"]), eg = floats(c["grad"]);
    const auto [y, g] = run_op(x, p);
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(y[i], ey[i]) << c["name"] << " x = " << x[i];
      EXPECT_EQ(g[i], eg[i]) << c["name"] << " x = " << x[i];
    }
  }
}

TEST(FakeQuantize, PerChannelMatchesReference) {
  Generator gen(3);
  const Shape s{3, 4, 5};
  const std::vector<float> x = randn(s, gen).to_vector<float>();
  const std::vector<QParams> p = {
      {0.01f, 0, -128, 127}, {0.02f, 0, -128, 127}, {0.005f, 0, -128, 127}, {0.03f, 0, -128, 127}};
  Tensor t = from_vector(x, s).requires_grad_();
  Tensor y = fake_quantize_per_channel(t, p, 1);
  sum(y).backward();
  std::vector<float> ref = x;
  std::vector<uint8_t> mask(x.size());
  const std::vector<int64_t> shape{3, 4, 5};
  fake_quantize_int8_per_channel(ref, shape, 1, p, mask);
  const auto yv = y.to_vector<float>(), gv = t.grad().to_vector<float>();
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(yv[i], ref[i]);
    EXPECT_EQ(gv[i], float(mask[i]));
  }
}

TEST(FakeQuantize, GradientIsUpstreamTimesMask) {
  const QParams p{0.5f, 0, -4, 3};  // a tiny range: many values clamp
  const std::vector<float> x{-3.0f, -2.0f, -1.9f, 0.3f, 1.4f, 1.75f, 1.76f, 2.2f};
  Tensor t = from_vector(x, Shape{8}).requires_grad_();
  Tensor w = from_vector(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}, Shape{8});
  sum(mul(fake_quantize(t, p), w)).backward();
  const auto g = t.grad().to_vector<float>();
  for (size_t i = 0; i < x.size(); ++i) {
    bool in = false;
    fake_quantize_int8_value(x[i], p, &in);
    EXPECT_EQ(g[i], in ? float(i + 1) : 0.0f) << x[i];
  }
}

TEST(FakeQuantize, ModuleObservesThenQuantizes) {
  ObserverSpec spec;  // min-max, quint8 affine
  FakeQuantize fq(spec);
  EXPECT_FALSE(fq.has_data());
  const Tensor x = from_vector(std::vector<float>{-1.0f, 0.3f, 2.0f, 0.01f}, Shape{4});
  // Observer disabled and no data: passes through unchanged (convert would refuse it).
  fq.enable_observer(false);
  EXPECT_EQ(fq.forward(x).to_vector<float>(), x.to_vector<float>());
  fq.enable_observer(true);
  const Tensor y = fq.forward(x);
  ASSERT_TRUE(fq.has_data());
  const QParams q = fq.qparams()[0];
  const QParams expect = compute_qparams(-1.0f, 2.0f, spec.config);
  EXPECT_EQ(q.scale, expect.scale);
  EXPECT_EQ(q.zero_point, expect.zero_point);
  std::vector<float> ref = x.to_vector<float>();
  fake_quantize_int8(ref, expect, {});
  EXPECT_EQ(y.to_vector<float>(), ref);
  // Fake quant off: identity, observer still records.
  fq.enable_fake_quant(false);
  const Tensor big = from_vector(std::vector<float>{5.0f}, Shape{1});
  EXPECT_EQ(fq.forward(big).to_vector<float>()[0], 5.0f);
  EXPECT_EQ(fq.buffer("max_val").to_vector<float>()[0], 5.0f);
  // Buffers are the checkpointed state.
  const auto names = fq.named_buffers();
  ASSERT_EQ(names.size(), 4u);
  EXPECT_EQ(names[0].first, "min_val");
  EXPECT_EQ(names[3].first, "zero_point");
}

}  // namespace
}  // namespace mixp::quant
