// Backend selection, thread count, and kernels called directly (paths the front ends do not
// reach yet, such as the bf16 GEMM case the mixed-precision issue wires in).
#include <gtest/gtest.h>

#include "mixp/format/cpu_features.h"
#include "mixp/mixp.h"
#include "ops/op_test_util.h"

namespace mixp {
namespace {

TEST(Backend, GuardSelectsPerThread) {
  EXPECT_EQ(std::string(backend().name()), "cpu");
  {
    BackendGuard g(BackendKind::ref);
    EXPECT_EQ(std::string(backend().name()), "ref");
    EXPECT_EQ(current_backend_kind(), BackendKind::ref);
    {
      BackendGuard g2(BackendKind::cpu);
      EXPECT_EQ(std::string(backend().name()), "cpu");
    }
    EXPECT_EQ(std::string(backend().name()), "ref");
  }
  EXPECT_EQ(current_backend_kind(), BackendKind::cpu);
}

TEST(Backend, NumThreads) {
  const int n = get_num_threads();
  set_num_threads(1);
  EXPECT_EQ(get_num_threads(), 1);
  Generator g(1);
  const Tensor a = randn({300, 200}, g), b = randn({200, 100}, g);
  const Tensor c1 = matmul(a, b);
  set_num_threads(2);
  EXPECT_EQ(get_num_threads(), 2);
  const Tensor c2 = matmul(a, b);
  EXPECT_LE(testing::normalized_error(c1, c2), 1e-6);
  EXPECT_THROW(set_num_threads(0), std::invalid_argument);
  set_num_threads(n);
}

TEST(Backend, CpuMatmulBf16Case) {
  if (!cpu_features().use_avx512()) GTEST_SKIP() << "oneDNN bf16 needs AVX-512";
  Generator g(2);
  const Tensor a = randn({64, 48}, g).to(DType::bf16, Round::nearest_even);
  const Tensor b = randn({48, 32}, g).to(DType::bf16, Round::nearest_even);
  const Tensor bias = randn({32}, g);
  Tensor d16 = empty({64, 32}), d32 = empty({64, 32});
  MatmulConfig cfg;
  cfg.compute = DType::bf16;
  get_backend(BackendKind::cpu).matmul(d16, a, b, bias, cfg);
  // bf16 products are exact in fp32: the fp32 GEMM of the widened inputs is the reference.
  get_backend(BackendKind::ref)
      .matmul(d32, a.to(DType::fp32), b.to(DType::fp32), bias, MatmulConfig{});
  EXPECT_LE(testing::normalized_error(d16, d32), 1e-5);
}

TEST(Backend, MatmulAccumulateAndEpilogue) {
  Generator g(3);
  const Tensor a = randn({8, 5}, g), b = randn({5, 6}, g), bias = randn({6}, g);
  for (BackendKind k : {BackendKind::cpu, BackendKind::ref}) {
    Tensor d = ones({8, 6});
    MatmulConfig cfg;
    cfg.accumulate = true;
    get_backend(k).matmul(d, a, b, bias, cfg);
    Tensor ref = add(add(matmul(a, b), bias), 1.0);
    EXPECT_LE(testing::normalized_error(d, ref), 1e-6) << to_string(k);
    Tensor r = empty({8, 6});
    cfg = MatmulConfig{};
    cfg.activation = Activation::relu;
    get_backend(k).matmul(r, a, b, bias, cfg);
    EXPECT_LE(testing::normalized_error(r, relu(add(matmul(a, b), bias))), 1e-6) << to_string(k);
  }
}

}  // namespace
}  // namespace mixp
