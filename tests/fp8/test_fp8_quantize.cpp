// The FP8/MX quantize kernels against the scalar reference encoder (float_codec.h) bit for bit,
// on every SIMD tier this CPU has: saturation at 448 / 57344, subnormals, ties, NaN; MX shared
// exponents on crafted blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/fp8_kernels.h"
#include "mixp/amp/fp8_quantize.h"
#include "mixp/backend/backend.h"
#include "mixp/amp/fp8_scaling.h"
#include "mixp/format/block_mx.h"
#include "mixp/format/convert.h"
#include "mixp/format/cpu_features.h"
#include "mixp/format/float_codec.h"
#include "mixp/ops/ops.h"
#include "mixp/tensor/factories.h"

using namespace mixp;
using namespace mixp::amp;

namespace {

const FloatFormat& fmt_of(DType d) { return d == DType::fp8_e4m3 ? kFp8E4M3 : kFp8E5M2; }

// The reference: encode x * scale (computed in fp32, as the kernels and TE do) with the generic
// encoder, saturating, decode, and take the bf16 of that value (exact).
uint16_t ref_bits(float x, float scale, DType d) {
  const float v = x * scale;
  const uint32_t code =
      encode_float(fmt_of(d), v, Round::nearest_even, Overflow::saturate, 0, nullptr);
  const float back = static_cast<float>(decode_float(fmt_of(d), code));
  const uint32_t b = std::bit_cast<uint32_t>(back);
  EXPECT_EQ(b & 0xffffu, 0u) << "fp8 value not exact in bf16: " << back;
  return static_cast<uint16_t>(b >> 16);
}

float bf16_value(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

std::vector<const cpu::fp8k::Kernels*> tiers() {
  std::vector<const cpu::fp8k::Kernels*> v{&cpu::fp8k::kernels_generic()};
  if (cpu_features().use_avx2()) v.push_back(&cpu::fp8k::kernels_avx2());
  if (cpu_features().use_avx512()) v.push_back(&cpu::fp8k::kernels_avx512());
  return v;
}

// Inputs that exercise every branch: random bit patterns, every fp8 grid point and the
// midpoints between neighbours (ties), the saturation thresholds, subnormals, zeros, inf, NaN.
std::vector<float> edge_inputs(DType d) {
  std::vector<float> v;
  std::mt19937 rng(7);
  for (int i = 0; i < 20000; ++i) v.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  std::vector<double> grid;
  for (uint32_t c = 0; c < 256; ++c) {
    const double x = decode_float(fmt_of(d), c);
    if (std::isfinite(x)) grid.push_back(x);
  }
  std::sort(grid.begin(), grid.end());
  for (size_t i = 0; i + 1 < grid.size(); ++i) {
    const double mid = 0.5 * (grid[i] + grid[i + 1]);
    for (double x : {grid[i], mid}) {
      const float f = static_cast<float>(x);
      v.push_back(f);
      v.push_back(std::nextafter(f, INFINITY));
      v.push_back(std::nextafter(f, -INFINITY));
    }
  }
  for (float x : {448.0f, 449.0f, 463.9f, 464.0f, 465.0f, 480.0f, 1e6f, 57344.0f, 57345.0f,
                  61439.0f, 61440.0f, 65536.0f, 1e30f, FLT_MAX, INFINITY, -INFINITY, NAN, -NAN,
                  0.0f, -0.0f, 1e-40f, -1e-45f, 0.0009765625f, 0.00146484375f, 1.52587890625e-05f})
    v.push_back(x);
  return v;
}

}  // namespace

TEST(Fp8Quantize, MatchesReferenceEncoderOnEveryTier) {
  for (DType d : {DType::fp8_e4m3, DType::fp8_e5m2}) {
    const std::vector<float> in = edge_inputs(d);
    for (float scale : {1.0f, 0.75f, 3.0517578125e-05f, 1234.5f}) {
      std::vector<uint16_t> want(in.size());
      for (size_t i = 0; i < in.size(); ++i) want[i] = ref_bits(in[i], scale, d);
      for (const auto* k : tiers()) {
        std::vector<uint16_t> got(in.size());
        k->scale_cast_bf16(in.data(), static_cast<int64_t>(in.size()), scale,
                           d == DType::fp8_e5m2, got.data());
        for (size_t i = 0; i < in.size(); ++i) {
          const float w = bf16_value(want[i]), g = bf16_value(got[i]);
          if (std::isnan(w)) {
            ASSERT_TRUE(std::isnan(g)) << k->tier << " " << name(d) << " x=" << in[i];
            continue;
          }
          ASSERT_EQ(got[i], want[i]) << k->tier << " " << name(d) << " x=" << in[i]
                                     << " scale=" << scale << " want " << w << " got " << g;
        }
      }
    }
  }
}

TEST(Fp8Quantize, SaturatesAtTheFormatMax) {
  const std::vector<float> x{448.0f, 500.0f, 1e9f, INFINITY, -INFINITY, -1e9f, 60000.0f, 1e30f};
  std::vector<uint16_t> e4(x.size()), e5(x.size());
  fp8_quantize_to_bf16(x, DType::fp8_e4m3, 1.0f, e4);
  fp8_quantize_to_bf16(x, DType::fp8_e5m2, 1.0f, e5);
  const float e4w[] = {448, 448, 448, 448, -448, -448, 448, 448};
  const float e5w[] = {448, 512, 57344, 57344, -57344, -57344, 57344, 57344};
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(bf16_value(e4[i]), e4w[i]) << x[i];
    EXPECT_EQ(bf16_value(e5[i]), e5w[i]) << x[i];
  }
  // NaN stays NaN (saturation clamps only finite overflow and inf).
  const std::vector<float> n{NAN};
  std::vector<uint16_t> o(1);
  fp8_quantize_to_bf16(n, DType::fp8_e4m3, 1.0f, o);
  EXPECT_TRUE(std::isnan(bf16_value(o[0])));
}

TEST(Fp8Quantize, AmaxIgnoresNanAndIsComputedInTheCast) {
  std::vector<float> x(100000);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (auto& v : x) v = nd(rng);
  x[777] = -9.5f;
  x[12345] = NAN;
  std::vector<uint16_t> o(x.size());
  EXPECT_EQ(fp8_amax(x), 9.5f);
  EXPECT_EQ(fp8_quantize_to_bf16(x, DType::fp8_e4m3, 2.0f, o), 9.5f);
  for (const auto* k : tiers()) EXPECT_EQ(k->amax(x.data(), 100000), 9.5f) << k->tier;
  x[5] = -INFINITY;
  EXPECT_EQ(fp8_amax(x), INFINITY);
}

TEST(Fp8Quantize, CurrentScalingMapsTheAmaxToTheFormatMax) {
  Generator g(5);
  Tensor x = randn({64, 33}, g) * 0.01;
  x.set_at({3, 7}, -0.125);
  for (DType d : {DType::fp8_e4m3, DType::fp8_e5m2}) {
    Fp8Quantized q = fp8_quantize_current(x, d);
    EXPECT_EQ(q.amax, 0.125f);
    EXPECT_EQ(q.scale, fp8_max(d) / 0.125f);
    EXPECT_EQ(q.scale_inv, 1.0f / q.scale);
    EXPECT_EQ(q.data.dtype(), DType::bf16);
    EXPECT_EQ(q.data.at({3, 7}), -static_cast<double>(fp8_max(d)));
    // Every code is an fp8 value and dequantizes close to x.
    const auto xs = x.to_vector<float>();
    const auto qs = q.data.to_vector<float>();
    for (size_t i = 0; i < xs.size(); ++i) {
      EXPECT_EQ(qs[i], bf16_value(ref_bits(xs[i], q.scale, d)));
      EXPECT_NEAR(qs[i] * q.scale_inv, xs[i], std::abs(xs[i]) * 0.13 + 1e-7);
    }
  }
  // An all-zero tensor: amax 0 -> scale 1 (TE).
  Fp8Quantized z = fp8_quantize_current(zeros({4, 4}), DType::fp8_e4m3);
  EXPECT_EQ(z.scale, 1.0f);
}

TEST(Fp8Quantize, FakeQuantizeHasAStraightThroughGradient) {
  Tensor x = from_vector(std::vector<float>{0.1f, -3.3f, 700.0f}, {3}).requires_grad_();
  Tensor y = fp8_fake_quantize(x, DType::fp8_e4m3, 1.0f);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{0.1015625f, -3.25f, 448.0f}));
  sum(y * 2.0).backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{2, 2, 2}));
  EXPECT_THROW(fp8_quantize(x.detach(), DType::fp8_e4m3, 0.0f), std::invalid_argument);
  EXPECT_THROW(fp8_quantize(x.detach(), DType::bf16, 1.0f), std::invalid_argument);
}

// ---- MXFP8

namespace {

// mx_fake_quantize (block_mx.h, the scalar reference) then bf16 nearest-even.
std::vector<uint16_t> mx_ref(const std::vector<float>& x, int64_t row_len, DType d, int block) {
  std::vector<float> f = x;
  mx_fake_quantize(f, row_len, d == DType::fp8_e4m3 ? MxElement::fp8_e4m3 : MxElement::fp8_e5m2,
                   {.block_size = block});
  std::vector<uint16_t> out(f.size());
  convert_f32_to(DType::bf16, f, out.data(), {Round::nearest_even, Overflow::ieee});
  return out;
}

void expect_mx_matches(const std::vector<float>& x, int64_t row_len, DType d, int block) {
  const std::vector<uint16_t> want = mx_ref(x, row_len, d, block);
  for (const auto* k : tiers()) {
    std::vector<uint16_t> got(x.size());
    k->mx_cast_bf16(x.data(), static_cast<int64_t>(x.size()) / row_len, row_len, block,
                    d == DType::fp8_e5m2, got.data());
    for (size_t i = 0; i < x.size(); ++i) {
      if (std::isnan(bf16_value(want[i]))) {
        ASSERT_TRUE(std::isnan(bf16_value(got[i]))) << k->tier << " i=" << i;
        continue;
      }
      ASSERT_EQ(got[i], want[i]) << k->tier << " " << name(d) << " i=" << i << " x=" << x[i]
                                 << " want " << bf16_value(want[i]) << " got "
                                 << bf16_value(got[i]);
    }
  }
}

}  // namespace

TEST(Fp8Mx, MatchesMxFakeQuantizeOnRandomBlocks) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  std::uniform_int_distribution<int> ex(-40, 40);
  for (int64_t row_len : {32, 70, 96, 5}) {
    std::vector<float> x(static_cast<size_t>(row_len * 13));
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = std::ldexp(nd(rng), (i / 32) % 3 == 0 ? ex(rng) : 0);  // blocks of very different range
    for (DType d : {DType::fp8_e4m3, DType::fp8_e5m2}) {
      expect_mx_matches(x, row_len, d, 32);
      expect_mx_matches(x, row_len, d, 16);
    }
  }
}

TEST(Fp8Mx, SharedExponentOnCraftedBlocks) {
  // 1. amax 0: scale 2^-127, all zeros.
  std::vector<float> zero(32, 0.0f);
  zero[3] = -0.0f;
  EXPECT_EQ(mx_shared_scale(0u, MxElement::fp8_e4m3).exponent(), -127);
  expect_mx_matches(zero, 32, DType::fp8_e4m3, 32);
  std::vector<uint16_t> out(32);
  mxfp8_quantize_to_bf16(zero, 32, DType::fp8_e4m3, 32, out);
  for (uint16_t b : out) EXPECT_EQ(bf16_value(b), 0.0f);

  // 2. Block max above the element max: amax = 1.9 * 2^5 -> shared = 5 - 8 = -3, the max scales
  //    to 1.9 * 2^8 = 486.4 > 448 and saturates: 448 * 2^-3 = 56 = 1.75 * 2^5.
  std::vector<float> blk(32);
  for (int i = 0; i < 32; ++i) blk[i] = 0.5f + 0.01f * i;
  blk[9] = 1.9f * 32.0f;
  blk[10] = -1.9f * 32.0f;
  EXPECT_EQ(mx_shared_scale(blk, MxElement::fp8_e4m3).exponent(), -3);
  mxfp8_quantize_to_bf16(blk, 32, DType::fp8_e4m3, 32, out);
  EXPECT_EQ(bf16_value(out[9]), 56.0f);
  EXPECT_EQ(bf16_value(out[10]), -56.0f);
  expect_mx_matches(blk, 32, DType::fp8_e4m3, 32);
  // E5M2: emax 15, shared = 5 - 15 = -10; 1.9 * 2^15 = 62259 > 57344 saturates too.
  EXPECT_EQ(mx_shared_scale(blk, MxElement::fp8_e5m2).exponent(), -10);
  mxfp8_quantize_to_bf16(blk, 32, DType::fp8_e5m2, 32, out);
  EXPECT_EQ(bf16_value(out[9]), 57344.0f / 1024.0f);
  expect_mx_matches(blk, 32, DType::fp8_e5m2, 32);

  // 3. Exactly a power of two: amax 2^-20 -> shared -28, no saturation, values exact.
  std::vector<float> p2(32, std::ldexp(1.0f, -22));
  p2[0] = std::ldexp(1.0f, -20);
  mxfp8_quantize_to_bf16(p2, 32, DType::fp8_e4m3, 32, out);
  EXPECT_EQ(bf16_value(out[0]), std::ldexp(1.0f, -20));
  EXPECT_EQ(bf16_value(out[1]), std::ldexp(1.0f, -22));

  // 4. A NaN or inf in a block makes the whole block NaN; the next block is unaffected.
  std::vector<float> two(64, 1.0f);
  two[5] = INFINITY;
  std::vector<uint16_t> o2(64);
  mxfp8_quantize_to_bf16(two, 64, DType::fp8_e4m3, 32, o2);
  for (int i = 0; i < 32; ++i) EXPECT_TRUE(std::isnan(bf16_value(o2[i])));
  for (int i = 32; i < 64; ++i) EXPECT_EQ(bf16_value(o2[i]), 1.0f);
  expect_mx_matches(two, 64, DType::fp8_e4m3, 32);

  // 5. Tiny blocks (shared exponent clamped at -127, fp32 subnormal results) still match.
  std::vector<float> tiny(32);
  for (int i = 0; i < 32; ++i) tiny[i] = std::ldexp(static_cast<float>(i + 1), -140);
  expect_mx_matches(tiny, 32, DType::fp8_e4m3, 32);
  expect_mx_matches(tiny, 32, DType::fp8_e5m2, 32);
}

TEST(Fp8Mx, TensorFrontEnd) {
  Generator g(9);
  Tensor x = randn({8, 100}, g);
  Fp8Quantized q = mxfp8_quantize(x, DType::fp8_e4m3);
  EXPECT_EQ(q.data.shape(), x.shape());
  EXPECT_EQ(q.scale_inv, 1.0f);
  const auto want = mx_ref(x.to_vector<float>(), 100, DType::fp8_e4m3, 32);
  const auto got = q.data.to_vector<float>();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], bf16_value(want[i]));
  std::vector<float> bad(10);
  std::vector<uint16_t> o(10);
  EXPECT_THROW(mxfp8_quantize_to_bf16(bad, 3, DType::fp8_e4m3, 32, o), std::invalid_argument);
}

TEST(Fp8Mx, ColumnsAreTheRowsOfTheTransposeBitForBit) {
  // mxfp8_columns (the cpu backend's tiled kernel, and the Backend default of the ref backend)
  // against mxfp8_rows of the contiguous transpose: every bit, for column lengths that end in a
  // partial block, widths that end in a partial tile of 64 columns, blocks with very different
  // ranges, a NaN and an inf (which make their blocks NaN), e4m3 and e5m2, one and two threads.
  std::mt19937 rng(12);
  std::normal_distribution<float> nd;
  std::uniform_int_distribution<int> ex(-40, 40);
  const int prev_threads = get_num_threads();
  for (BackendKind kind : {BackendKind::cpu, BackendKind::ref}) {
    BackendGuard bg(kind);
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      for (const auto& [R, C] : {std::pair<int64_t, int64_t>{64, 128}, {70, 37}, {5, 200},
                                 {300, 130}, {1, 1}}) {
        std::vector<float> v(static_cast<size_t>(R * C));
        for (size_t i = 0; i < v.size(); ++i)
          v[i] = std::ldexp(nd(rng), (i / 7) % 3 == 0 ? ex(rng) : 0);
        if (v.size() > 40) {
          v[17] = std::numeric_limits<float>::quiet_NaN();
          v[v.size() - 3] = std::numeric_limits<float>::infinity();
        }
        const Tensor x = from_vector(v, {R, C});
        for (DType d : {DType::fp8_e4m3, DType::fp8_e5m2}) {
          for (int block : {32, 16}) {
            SCOPED_TRACE(::testing::Message() << R << "x" << C << " " << name(d) << " block "
                                              << block << " threads " << threads);
            const Tensor got = mxfp8_columns(x, d, block);
            const Tensor want = mxfp8_rows(x.t().contiguous(), d, block);
            ASSERT_EQ(got.shape(), want.shape());
            ASSERT_TRUE(got.is_contiguous());
            const auto* gp = static_cast<const uint16_t*>(got.data_ptr());
            const auto* wp = static_cast<const uint16_t*>(want.data_ptr());
            EXPECT_EQ(std::memcmp(gp, wp, static_cast<size_t>(R * C) * 2), 0);
          }
        }
      }
    }
  }
  set_num_threads(prev_threads);
}

TEST(Fp8Gemm, AppliesBothScaleInvsToTheFp32Result) {
  Generator g(21);
  Tensor a = randn({9, 50}, g), b = randn({50, 7}, g);
  const Fp8Quantized qa = fp8_quantize_current(a, DType::fp8_e4m3);
  const Fp8Quantized qb = fp8_quantize_current(b.t(), DType::fp8_e4m3);  // [7, 50], as a weight
  Fp8Quantized qbt = qb;
  qbt.data = qb.data.t();  // [50, 7] view
  const Tensor y = fp8_gemm(qa, qbt);
  const auto av = qa.data.to_vector<double>(), bv = qb.data.to_vector<double>();
  const auto yv = y.to_vector<double>();
  const double alpha = static_cast<double>(qa.scale_inv * qb.scale_inv);
  for (int64_t i = 0; i < 9; ++i)
    for (int64_t j = 0; j < 7; ++j) {
      double s = 0, m = 0;
      for (int64_t k = 0; k < 50; ++k) {
        s += av[i * 50 + k] * bv[j * 50 + k];
        m += std::abs(av[i * 50 + k] * bv[j * 50 + k]);
      }
      ASSERT_NEAR(yv[i * 7 + j], s * alpha, 1e-5 * m * alpha);
    }
}
