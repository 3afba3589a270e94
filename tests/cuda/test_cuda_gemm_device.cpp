// The 8-bit GEMMs of the CUDA backend (backend/cuda_entry.h: cuda_fp8_matmul, cuda_int8_matmul)
// on cuda:0 against the same products computed on the cpu: FP8 E4M3 x E4M3 and E4M3 x E5M2 with
// per-tensor scales into bf16 and fp32 (native cuBLASLt FP8 on sm_89/sm_90, emulated elsewhere),
// and int8 x int8 -> int32 exactly. Skipped with the reason without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "mixp/backend/cuda_gemm.h"
#include "mixp/ops/ops.h"

namespace mixp {
namespace {

using namespace cuda_test;

TEST(CudaGemmDevice, Fp8GemmsMatchTheCpuProductOfTheSameValues) {
  REQUIRE_GPU();
  const int64_t M = 96, K = 128, N = 80;
  Tensor a32 = mul(host_randn(Shape{M, K}, 1), 4.0), b32 = mul(host_randn(Shape{K, N}, 2), 0.5);
  const float sa = 0.25f, sb = 3.0f;
  Tensor scale_a = from_vector(std::vector<float>{sa}, Shape{1}).to(kGpu);
  Tensor scale_b = from_vector(std::vector<float>{sb}, Shape{1}).to(kGpu);
  bool native = false;
  for (auto [ta, tb] : {std::pair{DType::fp8_e4m3, DType::fp8_e4m3},
                        {DType::fp8_e4m3, DType::fp8_e5m2},
                        {DType::fp8_e5m2, DType::fp8_e4m3}}) {
    Tensor a8 = a32.to(ta, Round::nearest_even, Overflow::saturate, 0);
    Tensor b8 = b32.to(tb, Round::nearest_even, Overflow::saturate, 0);
    // The reference: the fp8 values exactly (fp32), an fp32 GEMM, then the scales.
    Tensor want = mul(matmul(a8.to(DType::fp32), b8.to(DType::fp32)), static_cast<double>(sa * sb));
    // b as a linear weight [N, K] seen transposed (the TN layout, no copy) and as contiguous.
    const Tensor b_views[] = {b8.to(kGpu),
                              b8.transpose(0, 1).contiguous().to(kGpu).transpose(0, 1)};
    for (const Tensor& db : b_views) {
      for (DType out : {DType::fp32, DType::bf16}) {
        for (bool fast : {false, true}) {
          Tensor dst = Tensor::empty(Shape{M, N}, {.dtype = out, .device = kGpu});
          native = cuda_fp8_matmul(dst, a8.to(kGpu), db, scale_a, scale_b, fast);
          const double tol = out == DType::bf16 ? 1e-2 : (fast ? 1e-3 : 1e-5);
          EXPECT_LT(rel_error(dst, want), tol)
              << name(ta) << " x " << name(tb) << " -> " << name(out) << (fast ? " fast accum" : "")
              << (native ? " native" : " emulated");
        }
      }
    }
  }
  EXPECT_EQ(native, cuda_fp8_gemm_native(0));
  std::printf("fp8 GEMM path on this GPU: %s\n",
              native ? "cuBLASLt FP8 (native)" : "emulated (bf16)");
  Tensor e5 = a32.to(DType::fp8_e5m2, Round::nearest_even, Overflow::saturate, 0).to(kGpu);
  Tensor dst = Tensor::empty(Shape{M, M}, {.dtype = DType::fp32, .device = kGpu});
  EXPECT_THROW(cuda_fp8_matmul(dst, e5, e5.transpose(0, 1), scale_a, scale_b),
               std::exception)
      << "E5M2 x E5M2 is not an FP8 GEMM cuBLASLt has";
}

TEST(CudaGemmDevice, Int8GemmIsExact) {
  REQUIRE_GPU();
  const int64_t M = 64, K = 96, N = 48;
  std::vector<int64_t> av, bv;
  for (int64_t i = 0; i < M * K; ++i) av.push_back((i * 37 + 11) % 255 - 127);
  for (int64_t i = 0; i < K * N; ++i) bv.push_back((i * 53 + 5) % 255 - 127);
  Tensor a = from_vector(av, Shape{M, K}, {.dtype = DType::int8});
  Tensor b = from_vector(bv, Shape{K, N}, {.dtype = DType::int8});
  std::vector<int64_t> want(static_cast<size_t>(M * N), 0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k)
        want[static_cast<size_t>(m * N + n)] +=
            av[static_cast<size_t>(m * K + k)] * bv[static_cast<size_t>(k * N + n)];
  Tensor dst = Tensor::empty(Shape{M, N}, {.dtype = DType::int32, .device = kGpu});
  cuda_int8_matmul(dst, a.to(kGpu), b.to(kGpu));
  const Tensor got = dst.to(Device::cpu());
  const auto* g = static_cast<const int32_t*>(got.data_ptr());
  int bad = 0;
  for (size_t i = 0; i < want.size() && bad < 5; ++i) {
    if (g[i] != want[i]) {
      ++bad;
      ADD_FAILURE() << "int8 GEMM element " << i << ": " << g[i] << " != " << want[i];
    }
  }
}

}  // namespace
}  // namespace mixp
