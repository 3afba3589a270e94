// mixp::gemm (include/mixp/backend/gemm.h) against a reference matmul computed exactly in
// int64 / long double: bf16 with inputs exactly representable, int8 with exact integer results,
// transposed views, and the errors.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

#include "mixp/backend/gemm.h"
#include "mixp/format/cpu_features.h"
#include "mixp/mixp.h"

namespace mixp {
namespace {

// Row-major [M, N] reference of a [M, K] @ b [K, N] in long double (exact for the integer-valued
// cases below, and ~1e-19 relative otherwise).
// abs_values: sum of |a_ik b_kj| instead (for error bounds).
std::vector<long double> ref_matmul(const Tensor& a, const Tensor& b, bool abs_values = false) {
  const int64_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  std::vector<double> av = a.to_double_vector(), bv = b.to_double_vector();
  if (abs_values) {
    for (double& v : av) v = std::fabs(v);
    for (double& v : bv) v = std::fabs(v);
  }
  std::vector<long double> c(static_cast<size_t>(m * n), 0.0L);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < n; ++j)
        c[i * n + j] += static_cast<long double>(av[i * k + p]) * bv[p * n + j];
  return c;
}

// Without VNNI oneDNN's u8s8 kernel saturates int16 pair sums (see gemm.h); keep the weights
// within 7 bits there so that the exactness claim is what is tested. What counts is the ISA
// oneDNN runs (ONEDNN_MAX_CPU_ISA may cap it below the hardware's).
bool onednn_vnni() {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto has = [&](dnnl::cpu_isa need) {
    return (isa & static_cast<unsigned>(need)) == static_cast<unsigned>(need);
  };
  return (cpu_features().avx512_vnni && has(dnnl::cpu_isa::avx512_core_vnni)) ||
         (cpu_features().avx_vnni && has(dnnl::cpu_isa::avx2_vnni));
}
int64_t weight_max() { return onednn_vnni() ? 127 : 63; }

TEST(Gemm, Int8U8S8IsExact) {
  Generator g(11);
  for (const auto& [m, k, n] :
       std::vector<std::array<int64_t, 3>>{{1, 1, 1}, {7, 13, 5}, {64, 64, 64}, {33, 257, 19}}) {
    const Tensor a = randint(0, 256, {m, k}, g, {.dtype = DType::uint8});
    const Tensor b =
        randint(-weight_max() - 1, weight_max() + 1, {k, n}, g, {.dtype = DType::int8});
    const Tensor c = gemm(a, b);
    ASSERT_EQ(c.dtype(), DType::int32);
    ASSERT_EQ(c.shape(), (Shape{m, n}));
    const std::vector<long double> want = ref_matmul(a, b);
    const std::vector<double> got = c.to_double_vector();
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], static_cast<double>(want[i])) << m << "x" << k << "x" << n << " at " << i;
  }
}

TEST(Gemm, Int8ExtremesAccumulateWithoutSaturation) {
  if (!onednn_vnni()) GTEST_SKIP() << "exact extremes need VNNI (see gemm.h)";
  // 255 * -128 summed over K = 1024: -33,423,360, far beyond int16 pair sums, well within int32.
  const int64_t k = 1024;
  const Tensor a = full({3, k}, 255, {.dtype = DType::uint8});
  const Tensor b = full({k, 4}, -128, {.dtype = DType::int8});
  const std::vector<double> got = gemm(a, b).to_double_vector();
  for (double v : got) ASSERT_EQ(v, 255.0 * -128.0 * k);
}

TEST(Gemm, Int8S8S8IsExact) {
  Generator g(12);
  const Tensor a = randint(-128, 128, {17, 70}, g, {.dtype = DType::int8});
  const Tensor b =
      randint(-weight_max() - 1, weight_max() + 1, {70, 23}, g, {.dtype = DType::int8});
  const std::vector<long double> want = ref_matmul(a, b);
  const std::vector<double> got = gemm(a, b).to_double_vector();
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], static_cast<double>(want[i])) << i;
}

TEST(Gemm, Int8TransposedViewsNeedNoCopyAndAgree) {
  Generator g(13);
  const Tensor at = randint(0, 256, {40, 30}, g, {.dtype = DType::uint8});  // a = at^T: [30, 40]
  const Tensor bt = randint(-64, 64, {50, 40}, g, {.dtype = DType::int8});  // b = bt^T: [40, 50]
  const Tensor a = at.t(), b = bt.t();
  ASSERT_FALSE(a.is_contiguous());
  const std::vector<double> got = gemm(a, b).to_double_vector();
  const std::vector<double> want = gemm(a.contiguous(), b.contiguous()).to_double_vector();
  EXPECT_EQ(got, want);
  // A strided slice (neither inner stride 1) is copied and still right.
  const Tensor wide = randint(0, 256, {30, 80}, g, {.dtype = DType::uint8});
  const Tensor sliced = wide.slice(1, 0, 80, 2);
  EXPECT_EQ(gemm(sliced, b).to_double_vector(), gemm(sliced.contiguous(), b).to_double_vector());
}

// Small integers are exact in bf16, their products and sums (< 2^24) exact in fp32: the bf16
// GEMM must then be bit-exact.
TEST(Gemm, Bf16IntegerValuedIsExact) {
  Generator g(14);
  const Tensor a =
      randint(-8, 9, {37, 91}, g, {.dtype = DType::fp32}).to(DType::bf16, Round::nearest_even);
  const Tensor b =
      randint(-8, 9, {91, 29}, g, {.dtype = DType::fp32}).to(DType::bf16, Round::nearest_even);
  const Tensor c = gemm(a, b);
  ASSERT_EQ(c.dtype(), DType::fp32);
  const std::vector<long double> want = ref_matmul(a, b);
  const std::vector<double> got = c.to_double_vector();
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], static_cast<double>(want[i])) << i;
}

// General bf16 values: each product is exact in fp32; only the fp32 accumulation rounds, so the
// error is bounded by K * 2^-24 * sum_k |a_ik b_kj| (the standard recursive-summation bound with
// u = 2^-24; blocked summation only tightens it).
TEST(Gemm, Bf16RandomWithinFp32AccumulationBound) {
  Generator g(15);
  for (const auto& [m, k, n] :
       std::vector<std::array<int64_t, 3>>{{5, 3, 7}, {64, 128, 48}, {100, 513, 31}}) {
    const Tensor a = randn({m, k}, g).to(DType::bf16, Round::nearest_even);
    const Tensor b = randn({k, n}, g).to(DType::bf16, Round::nearest_even);
    const std::vector<double> got = gemm(a, b).to_double_vector();
    const std::vector<long double> want = ref_matmul(a, b);
    const std::vector<long double> mag = ref_matmul(a, b, true);
    for (size_t i = 0; i < got.size(); ++i) {
      const double bound = static_cast<double>(k) * 0x1.0p-24 * static_cast<double>(mag[i]);
      ASSERT_LE(std::fabs(got[i] - static_cast<double>(want[i])), bound)
          << m << "x" << k << "x" << n << " at " << i;
    }
  }
}

TEST(Gemm, Bf16TransposedViewsAgree) {
  Generator g(16);
  const Tensor at = randn({24, 40}, g).to(DType::bf16, Round::nearest_even);
  const Tensor b = randn({24, 16}, g).to(DType::bf16, Round::nearest_even);
  EXPECT_EQ(gemm(at.t(), b).to_double_vector(), gemm(at.t().contiguous(), b).to_double_vector());
}

// FP8 codes (the FP8 recipes' operands where the backend has FP8 GEMMs, Backend::fp8_matmul()):
// the cpu has none, so gemm() widens them to bf16 (exact) and runs the bf16 GEMM: bit for bit
// the bf16 GEMM of the same values, for each of the three pairs and transposed views.
TEST(Gemm, Fp8PairsAreTheBf16GemmOfTheSameValuesOnTheCpu) {
  EXPECT_FALSE(get_backend(BackendKind::cpu).fp8_matmul());
  EXPECT_FALSE(get_backend(BackendKind::ref).fp8_matmul());
  Generator g(19);
  const Tensor a32 = mul(randn({37, 64}, g), 8.0), b32 = mul(randn({48, 64}, g), 0.25);
  for (auto [ta, tb] : {std::pair{DType::fp8_e4m3, DType::fp8_e4m3},
                        {DType::fp8_e4m3, DType::fp8_e5m2},
                        {DType::fp8_e5m2, DType::fp8_e4m3}}) {
    const Tensor a8 = a32.to(ta, Round::nearest_even, Overflow::saturate, 0);
    const Tensor b8 = b32.to(tb, Round::nearest_even, Overflow::saturate, 0);  // [N, K]
    EXPECT_EQ(gemm_result_dtype(ta, tb), DType::fp32);
    const Tensor want = gemm(a8.to(DType::bf16), b8.to(DType::bf16).t());
    const Tensor got = gemm(a8, b8.t());
    ASSERT_EQ(got.dtype(), DType::fp32);
    EXPECT_EQ(got.to_double_vector(), want.to_double_vector()) << name(ta) << " x " << name(tb);
    EXPECT_EQ(gemm(a8, b8.t().contiguous()).to_double_vector(), want.to_double_vector());
    EXPECT_NE(gemm_implementation(ta, tb, 64, 64, 64).find("fp8 widened"), std::string::npos);
  }
  const Tensor e5 = a32.to(DType::fp8_e5m2, Round::nearest_even, Overflow::saturate, 0);
  EXPECT_THROW(gemm(e5, e5.t()), std::invalid_argument);  // no E5M2 x E5M2 (cuBLASLt has none)
}

TEST(Gemm, Fp32MatchesMatmul) {
  Generator g(17);
  const Tensor a = randn({33, 65}, g), b = randn({65, 17}, g);
  NoGradGuard ng;
  EXPECT_EQ(gemm(a, b).to_double_vector(), matmul(a, b).to_double_vector());
}

TEST(Gemm, IntoPreallocatedDst) {
  Generator g(18);
  const Tensor a = randint(0, 10, {4, 6}, g, {.dtype = DType::uint8});
  const Tensor b = randint(-5, 5, {6, 3}, g, {.dtype = DType::int8});
  Tensor dst = full({4, 3}, 12345, {.dtype = DType::int32});
  gemm(dst, a, b);
  EXPECT_EQ(dst.to_double_vector(), gemm(a, b).to_double_vector());
}

TEST(Gemm, ZeroSized) {
  const Tensor u = zeros({3, 0}, {.dtype = DType::uint8}),
               s = zeros({0, 4}, {.dtype = DType::int8});
  const Tensor c = gemm(u, s);  // K = 0: an empty sum
  ASSERT_EQ(c.shape(), (Shape{3, 4}));
  for (double v : c.to_double_vector()) EXPECT_EQ(v, 0.0);
  EXPECT_EQ(
      gemm(zeros({0, 5}, {.dtype = DType::uint8}), zeros({5, 2}, {.dtype = DType::int8})).numel(),
      0);
  const Tensor h = zeros({2, 0}, {.dtype = DType::bf16}), w = zeros({0, 3}, {.dtype = DType::bf16});
  for (double v : gemm(h, w).to_double_vector()) EXPECT_EQ(v, 0.0);
}

TEST(Gemm, RejectsUnsupportedPairsAndShapes) {
  const Tensor f = zeros({4, 4}), h = zeros({4, 4}, {.dtype = DType::fp16}),
               u = zeros({4, 4}, {.dtype = DType::uint8});
  const Tensor s = zeros({4, 4}, {.dtype = DType::int8});
  EXPECT_THROW(gemm(h, h), std::invalid_argument);  // fp16: convert first
  EXPECT_THROW(gemm(f, s), std::invalid_argument);
  EXPECT_THROW(gemm(s, u), std::invalid_argument);  // weights must be int8
  try {
    gemm(h, h);
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("uint8 x int8 -> int32"), std::string::npos) << e.what();
  }
  EXPECT_THROW(gemm(zeros({4, 5}), zeros({4, 5})), std::invalid_argument);
  Tensor wrong_dtype = zeros({4, 4});
  EXPECT_THROW(gemm(wrong_dtype, u, s), std::invalid_argument);  // u8s8 writes int32
  Tensor wrong_shape = zeros({4, 5}, {.dtype = DType::int32});
  EXPECT_THROW(gemm(wrong_shape, u, s), std::invalid_argument);
  EXPECT_EQ(gemm_result_dtype(DType::bf16, DType::bf16), DType::fp32);
  EXPECT_EQ(gemm_result_dtype(DType::uint8, DType::int8), DType::int32);
}

TEST(Gemm, ImplementationIsNamed) {
  EXPECT_FALSE(gemm_implementation(DType::uint8, DType::int8, 64, 64, 64).empty());
  EXPECT_FALSE(gemm_implementation(DType::bf16, DType::bf16, 64, 64, 64).empty());
  EXPECT_FALSE(gemm_implementation(DType::fp32, DType::fp32, 64, 64, 64).empty());
}

}  // namespace
}  // namespace mixp
