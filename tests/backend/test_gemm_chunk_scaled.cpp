// mixp::gemm_chunk_scaled (mixp/backend/gemm.h), fp8-block's one-pass GEMM: where it runs
// (mixp's bf16 kernel takes the 128-deep chunk GEMMs) it gives the bits of the chunk loop that
// amp/block_linear.cpp runs elsewhere (gemm per chunk + block_scaled_accumulate), in every
// operand layout, on ragged edges (M, N not multiples of the 8 x 48 register block) and over
// several K blocks; where it does not run it says so and leaves dst alone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/gemm_bf16.h"
#include "mixp/backend/gemm.h"
#include "mixp/format/block_scaled.h"
#include "mixp/mixp.h"

namespace mixp {
namespace {

// r x c bf16 values, N(0, 1), as the transposed view of a row-major [c, r] tensor when `t`.
Tensor operand(int64_t r, int64_t c, bool t, uint64_t seed) {
  Generator g(seed);
  const Tensor x = randn(t ? Shape{c, r} : Shape{r, c}, g).to(DType::bf16, Round::nearest_even);
  return t ? x.t() : x;
}

// Scales spread over 2^-20 .. 2^20 with full fp32 mantissas (not powers of two).
std::vector<float> scales(size_t n, uint64_t seed) {
  Generator g(seed);
  const std::vector<float> u = rand(Shape{static_cast<int64_t>(n)}, g).to_vector<float>();
  std::vector<float> s(n);
  for (size_t i = 0; i < n; ++i) s[i] = std::exp2(40.0f * u[i] - 20.0f) * (1.0f + u[i] / 3.0f);
  return s;
}

// What block_linear.cpp's chunk loop computes.
Tensor chunk_loop(const Tensor& a, const Tensor& b, const std::vector<float>& ra,
                  const std::vector<float>& cb) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1), C = K / 128;
  Tensor y = empty({M, N}), part = empty({M, N});
  std::vector<float> sa(static_cast<size_t>(M));
  for (int64_t c = 0; c < C; ++c) {
    gemm(part, a.slice(1, c * 128, c * 128 + 128), b.slice(0, c * 128, c * 128 + 128));
    for (int64_t m = 0; m < M; ++m) sa[static_cast<size_t>(m)] = ra[static_cast<size_t>(m * C + c)];
    block_scaled_accumulate(std::span<float>(y.data<float>(), static_cast<size_t>(M * N)),
                            std::span<const float>(part.data<float>(), static_cast<size_t>(M * N)),
                            M, N, sa,
                            std::span<const float>(cb.data() + c * N, static_cast<size_t>(N)),
                            c == 0);
  }
  return y;
}

bool kernel_takes(const Tensor& a, const Tensor& b) {
  Tensor d = empty({a.size(0), b.size(1)});
  cpu::Bf16Gemm g = cpu::describe_bf16_gemm(d, a.slice(1, 0, 128), b.slice(0, 0, 128), Tensor(), false);
  return cpu::own_bf16_gemm(g);
}

TEST(GemmChunkScaled, GivesTheChunkLoopsBitsInEveryLayout) {
  NoGradGuard ng;
  int ran = 0;
  // K = 4352: two K blocks of the kernel (17 chunks each), in the forward's layout only (time);
  // M, N ragged.
  for (const int64_t K : {384, 4352})
    for (const bool a_t : {false, true})
      for (const bool b_t : {false, true}) {
        if (K > 384 && (a_t || !b_t)) continue;
        const int64_t M = 517, N = 100, C = K / 128;
        const Tensor a = operand(M, K, a_t, 3 + K), b = operand(K, N, b_t, 5 + K);
        const std::vector<float> ra = scales(static_cast<size_t>(M * C), 7),
                                 cb = scales(static_cast<size_t>(C * N), 9);
        Tensor y = full({M, N}, 42.0f);
        const bool asked = gemm_chunk_scaled_runs(y, a, b);
        const bool took = gemm_chunk_scaled(y, a, b, ra.data(), cb.data());
        SCOPED_TRACE(testing::Message() << "K " << K << " a_t " << a_t << " b_t " << b_t);
        ASSERT_EQ(asked, took) << "gemm_chunk_scaled_runs answers for gemm_chunk_scaled";
        ASSERT_EQ(took, kernel_takes(a, b));
        if (!took) {
          for (float v : y.to_vector<float>()) ASSERT_EQ(v, 42.0f) << "dst touched";
          continue;
        }
        ++ran;
        const Tensor want = chunk_loop(a, b, ra, cb);
        ASSERT_EQ(std::memcmp(y.data_ptr(), want.data_ptr(), static_cast<size_t>(M * N) * 4), 0);
      }
  if (ran == 0) GTEST_SKIP() << "mixp's bf16 kernel does not run here (no AVX512_BF16, or AMX)";
}

TEST(GemmChunkScaled, DeclinesWhatTheKernelWouldNot) {
  NoGradGuard ng;
  const std::vector<float> s(64 * 64, 1.0f);
  // Too small for the kernel (oneDNN runs the chunks), and K not a multiple of 128.
  Tensor y = full({40, 64}, 1.0f);
  EXPECT_FALSE(gemm_chunk_scaled_runs(y, operand(40, 256, false, 1), operand(256, 64, false, 2)));
  EXPECT_FALSE(gemm_chunk_scaled(y, operand(40, 256, false, 1), operand(256, 64, false, 2), s.data(), s.data()));
  Tensor z = full({600, 64}, 1.0f);
  const std::vector<float> big(600 * 4, 1.0f);
  EXPECT_FALSE(gemm_chunk_scaled_runs(z, operand(600, 200, false, 1), operand(200, 64, false, 2)));
  EXPECT_FALSE(gemm_chunk_scaled(z, operand(600, 200, false, 1), operand(200, 64, false, 2), big.data(), big.data()));
  // fp32 operands: the kernel reads bf16 only.
  Tensor w = full({600, 64}, 1.0f);
  EXPECT_FALSE(gemm_chunk_scaled_runs(w, full({600, 256}, 1.0f), full({256, 64}, 1.0f)));
  for (float v : y.to_vector<float>()) ASSERT_EQ(v, 1.0f);
  for (float v : z.to_vector<float>()) ASSERT_EQ(v, 1.0f);
}

}  // namespace
}  // namespace mixp
