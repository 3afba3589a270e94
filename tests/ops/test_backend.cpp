// Backend selection, thread count, and kernels called directly (paths the front ends do not
// reach yet, such as the bf16 GEMM case the mixed-precision issue wires in).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

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

// embedding_backward_add against the dense sequence it replaces (a zeroed [V, E] buffer, the
// scatter-add, then dweight += it), bit for bit: repeated rows (summed from +0 in index order
// before the add), rows never referenced (+ 0: -0 becomes +0), both backends, int32 and int64.
TEST(Backend, EmbeddingBackwardAddIsTheDenseSequenceBitForBit) {
  Generator g(11);
  const int64_t V = 37, E = 300;  // E over the cpu kernel's 256-column chunk
  std::vector<int64_t> rows;
  for (int i = 0; i < 200; ++i) rows.push_back((i * 7 + i / 3) % 29);  // many repeats, rows 29+ unused
  for (DType idt : {DType::int64, DType::int32}) {
    const Tensor idx = from_vector(rows, {20, 10}).to(idt, Round::nearest_even);
    const Tensor ddst = randn({20, 10, E}, g).mul_(1e3).add_(randn({20, 10, E}, g));
    Tensor start = randn({V, E}, g);
    // A few exact zeros of both signs in the existing gradient, referenced rows or not.
    start.data<float>()[5] = -0.0f;
    start.data<float>()[33 * E + 1] = -0.0f;
    start.data<float>()[34 * E + 2] = 0.0f;
    for (BackendKind k : {BackendKind::cpu, BackendKind::ref}) {
      Backend& be = get_backend(k);
      Tensor dense = zeros({V, E});
      be.embedding_backward(dense, ddst, idx);
      Tensor want = start.clone();
      be.add_inplace(want, dense, 1.0);
      Tensor got = start.clone();
      be.embedding_backward_add(got, ddst, idx);
      std::vector<uint32_t> wb(size_t(V * E)), gb(size_t(V * E));
      std::memcpy(wb.data(), want.data<float>(), wb.size() * 4);
      std::memcpy(gb.data(), got.data<float>(), gb.size() * 4);
      EXPECT_EQ(wb, gb) << be.name() << " " << name(idt);
      EXPECT_FALSE(std::signbit(got.data<float>()[33 * E + 1])) << "-0 + 0 is +0";
      // The base class's default (the dense sequence itself) agrees too.
      Tensor via_default = start.clone();
      be.Backend::embedding_backward_add(via_default, ddst, idx);
      std::memcpy(gb.data(), via_default.data<float>(), gb.size() * 4);
      EXPECT_EQ(wb, gb) << be.name() << " default";
    }
  }
}

}  // namespace
}  // namespace mixp
