// The block-scaled recipes' CUDA kernels on a GPU (docs/cuda.md "Block-scaled recipes"), each
// test skipped with the reason without one: the quantizers' codes, scales, scale codes and
// global amax bit for bit against the CPU (block_scaled_quantize), the fake quantization and
// the RHT bit for bit; the GEMM on the dequantize path against the CPU emulation's GEMM of the
// same operands (products exact, fp32 sums in another order: within 1e-5 relative), on
// cuBLASLt's block-scaled kernels where this GPU has them (within 1e-3 relative: Hopper's FP8
// tensor cores keep fewer accumulator bits inside a 128-block, DeepSeek-V3 3.3.2); and the
// block recipes training through `mixp train --device cuda` as on the cpu.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "mixp/backend/cuda_block.h"
#include "mixp/format/block_scaled.h"

namespace mixp {
namespace {

using cuda_test::kGpu;

std::vector<float> data(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-8, 4);
  std::vector<float> v(n);
  for (float& f : v) f = std::ldexp(nd(rng), ex(rng));
  v[0] = 0.0f;
  v[1] = -0.0f;
  return v;
}

Tensor on_gpu(const std::vector<float>& v, int64_t rows, int64_t cols) {
  Tensor t = Tensor::empty(Shape{rows, cols});
  std::memcpy(t.data_ptr(), v.data(), v.size() * 4);
  t.bump_version();
  return t.to(kGpu);
}

std::vector<uint32_t> bits(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * 4);
  return b;
}

struct Case {
  BlockScheme scheme;
  int tile_rows;
  bool pow2;
  Round round;
};
const Case kCases[] = {
    {BlockScheme::nvfp4, 1, false, Round::nearest_even},
    {BlockScheme::nvfp4, 16, false, Round::nearest_even},
    {BlockScheme::nvfp4, 1, false, Round::stochastic},
    {BlockScheme::mxfp4, 1, false, Round::nearest_even},
    {BlockScheme::mxfp4, 1, false, Round::stochastic},
    {BlockScheme::fp8_block, 1, false, Round::nearest_even},
    {BlockScheme::fp8_block, 128, false, Round::nearest_even},
    {BlockScheme::fp8_block, 128, true, Round::nearest_even},
};

BlockScaledOptions opts(const Case& c) {
  return {.scheme = c.scheme, .tile_rows = c.tile_rows, .pow2_scales = c.pow2, .round = c.round,
          .seed = 77};
}

TEST(CudaBlockDevice, QuantizersEqualTheCpuBitForBit) {
  REQUIRE_GPU();
  const int64_t rows = 257, cols = 300;
  const std::vector<float> x = data(static_cast<size_t>(rows * cols), 11);
  const Tensor xg = on_gpu(x, rows, cols);
  for (const Case& c : kCases) {
    const std::string what = std::string(to_string(c.scheme)) + " " + std::to_string(c.tile_rows);
    const BlockScaledTensor want = block_scaled_quantize(x, rows, cols, opts(c));
    const BlockScaledTensor got = cuda_block_quantize(xg, opts(c)).to_host();
    EXPECT_EQ(got.codes, want.codes) << what;
    EXPECT_EQ(bits(got.scales), bits(want.scales)) << what;
    EXPECT_EQ(got.scale_codes, want.scale_codes) << what;
    EXPECT_EQ(std::bit_cast<uint32_t>(got.global_amax), std::bit_cast<uint32_t>(want.global_amax))
        << what;
    std::vector<float> fq = x;
    block_scaled_fake_quantize(fq, rows, cols, opts(c));
    EXPECT_EQ(bits(cuda_block_fake_quantize(xg, opts(c)).to(Device::cpu()).to_vector<float>()),
              bits(fq))
        << what;
  }
}

TEST(CudaBlockDevice, RhtEqualsTheCpuBitForBit) {
  REQUIRE_GPU();
  std::vector<float> x = data(64 * 48, 13);
  Tensor g = on_gpu(x, 64, 48);
  cuda_rht16_rows(g);
  rht16_rows(x, 64, 48);
  EXPECT_EQ(bits(g.to(Device::cpu()).to_vector<float>()), bits(x));
}

// The CPU emulation's GEMM of the same quantized operands, in double: sum_k Q(a)[m][k] Q(b)[n][k].
std::vector<double> cpu_gemm(const std::vector<float>& a, const std::vector<float>& b, int64_t M,
                             int64_t N, int64_t K, const BlockScaledOptions& oa,
                             const BlockScaledOptions& ob) {
  std::vector<float> qa = a, qb = b;
  block_scaled_fake_quantize(qa, M, K, oa);
  block_scaled_fake_quantize(qb, N, K, ob);
  std::vector<double> y(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k)
        s += static_cast<double>(qa[static_cast<size_t>(m * K + k)]) * qb[static_cast<size_t>(n * K + k)];
      y[static_cast<size_t>(m * N + n)] = s;
    }
  return y;
}

double rel(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

void gemm_case(BlockGemmPath path, double tol) {
  const int64_t M = 96, N = 160, K = 384;  // K: 3 chunks of 128, 24 blocks of 16
  const std::vector<float> a = data(static_cast<size_t>(M * K), 21), b = data(static_cast<size_t>(N * K), 22);
  const Tensor ag = on_gpu(a, M, K), bg = on_gpu(b, N, K);
  struct G {
    BlockScheme s;
    int ta, tb;
  };
  for (const G& g : {G{BlockScheme::nvfp4, 1, 16}, G{BlockScheme::nvfp4, 1, 1},
                     G{BlockScheme::mxfp4, 1, 1}, G{BlockScheme::fp8_block, 1, 128},
                     G{BlockScheme::fp8_block, 1, 1}}) {
    const BlockScaledOptions oa{.scheme = g.s, .tile_rows = g.ta};
    const BlockScaledOptions ob{.scheme = g.s, .tile_rows = g.tb};
    BlockGemmPath used{};
    const Tensor y = cuda_block_gemm_nt(ag, bg, oa, ob, &used, &path);
    const std::string what = std::string(to_string(g.s)) + " " + std::to_string(g.ta) + "x" +
                             std::to_string(g.tb) + " on " + std::string(to_string(used));
    if (used != path) {
      ADD_FAILURE() << what << ": asked for " << to_string(path);
      continue;
    }
    EXPECT_LE(rel(y.to(Device::cpu()).to_vector<float>(), cpu_gemm(a, b, M, N, K, oa, ob)), tol)
        << what;
  }
}

TEST(CudaBlockDevice, DequantizedGemmIsTheCpuEmulations) {
  REQUIRE_GPU();
  gemm_case(BlockGemmPath::dequantize, 1e-5);
}

TEST(CudaBlockDevice, CublasLtBlockScaledGemmWithinTolerance) {
  REQUIRE_GPU();
  // Only the schemes this GPU has natively (block_gemm_path); the rest are the test above.
  const int64_t M = 128, N = 256, K = 512;
  const std::vector<float> a = data(static_cast<size_t>(M * K), 31), b = data(static_cast<size_t>(N * K), 32);
  const Tensor ag = on_gpu(a, M, K), bg = on_gpu(b, N, K);
  int native = 0;
  for (const auto& [s, tb] : {std::pair{BlockScheme::fp8_block, 128}, {BlockScheme::fp8_block, 1},
                              {BlockScheme::nvfp4, 16}, {BlockScheme::mxfp4, 1}}) {
    const BlockScaledOptions oa{.scheme = s, .tile_rows = 1}, ob{.scheme = s, .tile_rows = tb};
    BlockGemmPath used{};
    const Tensor y = cuda_block_gemm_nt(ag, bg, oa, ob, &used);
    if (used != BlockGemmPath::cublaslt) continue;
    ++native;
    EXPECT_LE(rel(y.to(Device::cpu()).to_vector<float>(), cpu_gemm(a, b, M, N, K, oa, ob)), 1e-3)
        << to_string(s) << " x " << tb;
  }
  if (native == 0) GTEST_SKIP() << "this GPU has no cuBLASLt block-scaled GEMM (sm_90: fp8-block, sm_100+: nvfp4/mxfp4)";
}

// `mixp train --device cuda --precision nvfp4|mxfp4|fp8-block`: without a GPU a clear error
// (exit 1, the runtime's reason, nothing on stdout), with one the cpu's losses.
TEST(CudaBlockDevice, BlockRecipesTrainOnCudaLikeTheCpu) {
  const std::string run = "train --model mlp --data synthetic --steps 3 --batch 16 --seed 3 --json";
  if (!cuda_available()) {
    std::string out, err;
    for (const char* p : {"nvfp4", "mxfp4", "fp8-block"}) {
      EXPECT_EQ(cuda_test::run_cli(run + " --device cuda --precision " + p, out, err), 1) << err;
      EXPECT_NE(err.find(cuda_status().built ? "no CUDA device" : "not built"), std::string::npos)
          << err;
      EXPECT_TRUE(out.empty()) << out;
    }
    GTEST_SKIP() << "the training half needs a GPU: " << cuda_status().message;
  }
  for (const char* p : {"nvfp4", "mxfp4", "fp8-block"})
    cuda_test::expect_trains_like_the_cpu(run + " --precision " + p, p);
}

}  // namespace
}  // namespace mixp
