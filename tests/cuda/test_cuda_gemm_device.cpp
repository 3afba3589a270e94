// The 8-bit GEMMs of the CUDA backend (backend/cuda_entry.h: cuda_fp8_matmul, cuda_int8_matmul)
// on cuda:0 against the same products computed on the cpu: FP8 E4M3 x E4M3 and E4M3 x E5M2 with
// per-tensor scales into bf16 and fp32 (native cuBLASLt FP8 on sm_89/sm_90, emulated elsewhere),
// and int8 x int8 -> int32 exactly. Skipped with the reason without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "mixp/amp/fp8_linear.h"
#include "mixp/amp/fp8_quantize.h"
#include "mixp/backend/backend.h"
#include "mixp/backend/cuda_gemm.h"
#include "mixp/backend/gemm.h"
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

// The FP8 recipes' route (docs/cuda.md): mixp::gemm with fp8 operands runs Backend::matmul with
// an fp8 compute on cuda (cuBLASLt's FP8 GEMM on sm_89+, K and the leading dimensions multiples
// of 16; the bf16 GEMM of the widened codes otherwise) and the cpu's bf16 GEMM of the same
// values on the host: the three layouts of fp8_linear (forward x w^T, dgrad g w, wgrad g^T x),
// the three pairs, an aligned and an unaligned K.
TEST(CudaGemmDevice, Fp8CodesThroughGemmMatchTheCpu) {
  REQUIRE_GPU();
  Backend& be = backend_for(kGpu);
  EXPECT_EQ(be.fp8_matmul(), cuda_fp8_gemm_native(0));
  for (int64_t K : {128, 40}) {
    const int64_t M = 96, N = 80;
    Tensor x32 = mul(host_randn(Shape{M, K}, 3), 8.0), w32 = mul(host_randn(Shape{N, K}, 4), 0.5);
    Tensor g32 = mul(host_randn(Shape{M, N}, 5), 100.0);
    for (auto [ta, tb] : {std::pair{DType::fp8_e4m3, DType::fp8_e4m3},
                          {DType::fp8_e5m2, DType::fp8_e4m3}}) {
      const Tensor x8 = x32.to(tb, Round::nearest_even, Overflow::saturate, 0);
      const Tensor w8 = w32.to(tb, Round::nearest_even, Overflow::saturate, 0);
      const Tensor g8 = g32.to(ta, Round::nearest_even, Overflow::saturate, 0);
      struct Case {
        const char* what;
        Tensor a, b;
      };
      const Case cases[] = {{"forward x w^T", x8, w8.t()},
                            {"dgrad g w", g8, w8},
                            {"wgrad g^T x", g8.t(), x8}};
      for (const Case& c : cases) {
        if (ta == DType::fp8_e5m2 && c.a.dtype() != DType::fp8_e5m2) continue;
        const Tensor want = gemm(c.a, c.b);  // cpu: the bf16 GEMM of the same values
        // On the GPU with the same layout (a transposed view stays one).
        auto on_gpu = [](const Tensor& t) {
          return t.strides()[0] == 1 ? t.t().contiguous().to(kGpu).t() : t.contiguous().to(kGpu);
        };
        const Tensor ga = on_gpu(c.a), gb = on_gpu(c.b);
        Tensor got = gemm(ga, gb);
        ASSERT_EQ(got.device(), kGpu);
        EXPECT_LT(rel_error(got, want), 1e-5) << c.what << " " << name(c.a.dtype()) << " x "
                                              << name(c.b.dtype()) << " K " << K;
      }
    }
  }
}

// fp8_quantize on cuda writes the codes as fp8 where the backend has FP8 GEMMs (bf16 values
// elsewhere), with the same values as the cpu's bf16 ones, bit for bit, and the same amax.
TEST(CudaGemmDevice, Fp8QuantizeKeepsTheCodesInFp8WhereTheGemmTakesThem) {
  REQUIRE_GPU();
  const Tensor x = mul(host_randn(Shape{64, 48}, 6), 30.0);
  for (DType f : {DType::fp8_e4m3, DType::fp8_e5m2}) {
    const amp::Fp8Quantized c = amp::fp8_quantize(x, f, 3.0f);
    const amp::Fp8Quantized g = amp::fp8_quantize(x.to(kGpu), f, 3.0f);
    EXPECT_EQ(c.data.dtype(), DType::bf16);
    EXPECT_EQ(g.data.dtype(), cuda_fp8_gemm_native(0) ? f : DType::bf16);
    expect_same_bits(g.data.to(Device::cpu()).to(DType::bf16), c.data, std::string(name(f)));
    EXPECT_EQ(g.amax, c.amax);
    const amp::Fp8Quantized gc = amp::fp8_quantize_current(x.to(kGpu), f, 0);
    const amp::Fp8Quantized cc = amp::fp8_quantize_current(x, f, 0);
    EXPECT_EQ(gc.scale, cc.scale);
    expect_same_bits(gc.data.to(Device::cpu()).to(DType::bf16), cc.data, "current");
  }
}

// fp8_linear (current scaling, ReLU, bias) forward and backward on cuda against the cpu: the
// same codes and scales, exact products, fp32 sums in another order.
TEST(CudaGemmDevice, Fp8LinearMatchesTheCpu) {
  REQUIRE_GPU();
  const int64_t M = 64, K = 96, N = 48;
  const Tensor x = mul(host_randn(Shape{M, K}, 7), 2.0), w = mul(host_randn(Shape{N, K}, 8), 0.05);
  const Tensor b = mul(host_randn(Shape{N}, 9), 0.1), r = host_randn(Shape{M, N}, 10);
  amp::Fp8LinearMeta mc(amp::Fp8Recipe::current()), mg(amp::Fp8Recipe::current());
  Tensor cx = x.clone().requires_grad_(), cw = w.clone().requires_grad_(),
         cb = b.clone().requires_grad_();
  Tensor gx = x.to(kGpu).requires_grad_(), gw = w.to(kGpu).requires_grad_(),
         gb = b.to(kGpu).requires_grad_();
  Tensor yc = amp::fp8_linear(cx, cw, cb, Activation::relu, mc);
  Tensor yg = amp::fp8_linear(gx, gw, gb, Activation::relu, mg);
  EXPECT_LT(rel_error(yg, yc), 1e-5) << "forward";
  sum(mul(yc, r)).backward();
  sum(mul(yg, r.to(kGpu))).backward();
  EXPECT_LT(rel_error(gx.grad(), cx.grad()), 1e-5) << "dgrad";
  EXPECT_LT(rel_error(gw.grad(), cw.grad()), 1e-5) << "wgrad";
  EXPECT_LT(rel_error(gb.grad(), cb.grad()), 1e-5) << "bias";
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
