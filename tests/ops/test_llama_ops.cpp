// The LLaMA family's ops and layers (issue 31 item 1; nn/llama.h): finite-difference gradient
// checks in fp64 on both backends, and the cpu kernels against the ref oracle in fp32.
#include <gtest/gtest.h>

#include <cmath>

#include "mixp/autograd/gradcheck.h"
#include "mixp/mixp.h"
#include "op_test_util.h"

namespace mixp {
namespace {
using testing::expect_cpu_matches_ref;
using testing::rnd;
using V = std::vector<Tensor>;

Tensor r64(const Shape& s, uint64_t seed) {
  Generator g(seed);
  return normal(s, 0.0, 1.0, g, {.dtype = DType::fp64}).requires_grad_();
}

void check(const char* what, const std::function<Tensor(const V&)>& fn, const V& inputs) {
  for (BackendKind kind : {BackendKind::ref, BackendKind::cpu}) {
    BackendGuard g(kind);
    V fresh;
    for (const Tensor& t : inputs) {
      Tensor c = t.detach().clone();
      if (t.requires_grad()) c.requires_grad_();
      fresh.push_back(c);
    }
    const GradcheckResult r = gradcheck(fn, fresh);
    EXPECT_TRUE(r.ok) << what << " on " << to_string(kind) << ": " << r.message;
  }
}

nn::RopeScaling llama3() {
  return nn::RopeScaling{.type = nn::RopeScaling::Type::llama3,
                         .factor = 8.0,
                         .low_freq_factor = 1.0,
                         .high_freq_factor = 4.0,
                         .original_max_position_embeddings = 16};
}

TEST(LlamaOps, RmsNormGradcheck) {
  check("rms_norm", [](const V& v) { return rms_norm(v[0], v[1], 1e-6); },
        {r64({3, 4, 8}, 1), r64({8}, 2)});
  check("rms_norm no weight", [](const V& v) { return rms_norm(v[0], Tensor(), 1e-5); },
        {r64({5, 6}, 3)});
}

TEST(LlamaOps, RmsNormValues) {
  // y = x / sqrt(mean(x^2) + eps) * w, by hand.
  const Tensor x = from_vector(std::vector<float>{1, 2, 3, 4, -1, 0, 0, 1}, {2, 4});
  const Tensor w = from_vector(std::vector<float>{1, 0.5f, 2, -1}, {4});
  for (BackendKind kind : {BackendKind::ref, BackendKind::cpu}) {
    BackendGuard g(kind);
    const std::vector<double> y = rms_norm(x, w, 1e-6).to_double_vector();
    const double r0 = 1.0 / std::sqrt(30.0 / 4 + 1e-6), r1 = 1.0 / std::sqrt(2.0 / 4 + 1e-6);
    const double want[8] = {r0, r0, 6 * r0, -4 * r0, -r1, 0, 0, -r1};
    for (int i = 0; i < 8; ++i) EXPECT_NEAR(y[size_t(i)], want[i], 1e-6) << to_string(kind) << i;
  }
}

TEST(LlamaOps, RopeGradcheckAndValues) {
  for (const nn::RopeScaling& s : {nn::RopeScaling{}, nn::RopeScaling{.type = nn::RopeScaling::Type::linear, .factor = 2.0}, llama3()}) {
    auto [c, sn] = nn::rope_tables(8, 6, 10000.0, s);
    check("rope", [c, sn](const V& v) { return rope(v[0], c, sn); }, {r64({2, 5, 3, 8}, 4)});
  }
  // Position 0 is the identity; position t rotates pair (j, j + D/2) by t inv_freq_j.
  auto [c, sn] = nn::rope_tables(4, 3, 100.0, {});
  const Tensor x = from_vector(std::vector<float>{1, 2, 3, 4, 1, 2, 3, 4}, {1, 2, 1, 4});
  const std::vector<double> y = rope(x, c, sn).to_double_vector();
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(float(y[size_t(i)]), float(i + 1));
  const double a0 = 1.0, a1 = 1.0 / 10.0;  // 100^(-0/4), 100^(-2/4)
  EXPECT_NEAR(y[4], 1 * std::cos(a0) - 3 * std::sin(a0), 1e-6);
  EXPECT_NEAR(y[5], 2 * std::cos(a1) - 4 * std::sin(a1), 1e-6);
  EXPECT_NEAR(y[6], 3 * std::cos(a0) + 1 * std::sin(a0), 1e-6);
  EXPECT_NEAR(y[7], 4 * std::cos(a1) + 2 * std::sin(a1), 1e-6);
}

TEST(LlamaOps, RopeScalingFrequencies) {
  const std::vector<double> base = nn::rope_inv_freq(16, 10000.0, {});
  const std::vector<double> lin =
      nn::rope_inv_freq(16, 10000.0, {.type = nn::RopeScaling::Type::linear, .factor = 4.0});
  const std::vector<double> l3 = nn::rope_inv_freq(16, 10000.0, llama3());
  ASSERT_EQ(base.size(), 8u);
  const double pi = 3.14159265358979323846;
  for (size_t j = 0; j < base.size(); ++j) {
    EXPECT_DOUBLE_EQ(lin[j], base[j] / 4.0);
    const double wavelen = 2 * pi / base[j];
    if (wavelen < 16.0 / 4.0) {
      EXPECT_DOUBLE_EQ(l3[j], base[j]) << j;  // high frequency: unchanged
    }
    if (wavelen > 16.0) {
      EXPECT_DOUBLE_EQ(l3[j], base[j] / 8.0) << j;  // low frequency: divided by the factor
    }
    EXPECT_LE(l3[j], base[j]);
    EXPECT_GE(l3[j], base[j] / 8.0);
  }
  EXPECT_THROW(nn::rope_inv_freq(7, 10000.0, {}), std::invalid_argument);
  EXPECT_THROW(nn::rope_inv_freq(8, 0.5, {}), std::invalid_argument);
}

TEST(LlamaOps, SwigluAndGqaGradcheck) {
  check("swiglu", [](const V& v) { return nn::swiglu(v[0], v[1]); },
        {r64({3, 7}, 5), r64({3, 7}, 6)});
  auto [c, sn] = nn::rope_tables(4, 8, 10000.0, llama3());
  // 4 query heads on 2 k/v heads (grouped-query), and 2 on 2 (multi-head), head dim 4.
  check("gqa", [c, sn](const V& v) { return nn::llama_attention(v[0], v[1], v[2], c, sn, 4, 2); },
        {r64({2, 5, 16}, 7), r64({2, 5, 8}, 8), r64({2, 5, 8}, 9)});
  check("mha", [c, sn](const V& v) { return nn::llama_attention(v[0], v[1], v[2], c, sn, 2, 2); },
        {r64({1, 4, 8}, 10), r64({1, 4, 8}, 11), r64({1, 4, 8}, 12)});
}

TEST(LlamaOps, GqaEqualsRepeatedHeads) {
  // Hkv = 1: every query head attends to the same k/v head, i.e. multi-head attention on k, v
  // repeated H times (HF's repeat_kv).
  auto [c, sn] = nn::rope_tables(4, 8, 10000.0, {});
  const Tensor q = rnd({2, 6, 12}, 20), k = rnd({2, 6, 4}, 21), v = rnd({2, 6, 4}, 22);
  const Tensor a = nn::llama_attention(q, k, v, c, sn, 3, 1);
  const Tensor b = nn::llama_attention(q, cat({k, k, k}, 2), cat({v, v, v}, 2), c, sn, 3, 3);
  EXPECT_LE(testing::normalized_error(a, b), 1e-6);
}

TEST(CpuVsRef, RmsNormAndRope) {
  for (const Shape& s : {Shape{4, 16}, Shape{2, 3, 256}, Shape{64, 576}}) {
    const Tensor x = rnd(s, 30, DType::fp32, 2.0), w = rnd({s.back()}, 31);
    expect_cpu_matches_ref("rms_norm", [](const V& v) { return rms_norm(v[0], v[1], 1e-5); },
                           {x, w});
    expect_cpu_matches_ref("rms_norm no weight", [](const V& v) { return rms_norm(v[0]); }, {x});
  }
  auto [c, sn] = nn::rope_tables(64, 40, 500000.0, llama3());
  expect_cpu_matches_ref("rope", [c, sn](const V& v) { return rope(v[0], c, sn); },
                         {rnd({2, 33, 3, 64}, 32)});
}

TEST(LlamaOps, AutocastRunsRmsNormInFp32) {
  const Tensor x = rnd({4, 32}, 40, DType::bf16), w = rnd({32}, 41);
  amp::Autocast ac(DType::bf16);
  const Tensor y = rms_norm(x, w);
  EXPECT_EQ(y.dtype(), DType::fp32);
  const Tensor r = rope(x.reshape({1, 4, 2, 16}), nn::rope_tables(16, 4, 1e4, {}).first,
                        nn::rope_tables(16, 4, 1e4, {}).second);
  EXPECT_EQ(r.dtype(), DType::bf16);
}

TEST(LlamaOps, ErrorsNameTheShapes) {
  auto [c, sn] = nn::rope_tables(8, 4, 1e4, {});
  EXPECT_THROW(rope(rnd({1, 5, 2, 8}, 1), c, sn), std::invalid_argument);  // T 5 > 4 positions
  EXPECT_THROW(rope(rnd({1, 4, 2, 6}, 1), c, sn), std::invalid_argument);  // D/2 3 != 4
  EXPECT_THROW(rms_norm(rnd({3, 4}, 1), rnd({5}, 2)), std::invalid_argument);
  EXPECT_THROW(nn::llama_attention(rnd({1, 2, 8}, 1), rnd({1, 2, 6}, 2), rnd({1, 2, 6}, 3), c, sn,
                                   2, 2),
               std::invalid_argument);
}

}  // namespace
}  // namespace mixp
