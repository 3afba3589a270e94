// mixp's bf16 GEMM (src/backend/cpu/gemm_bf16.h) through CpuBackend::matmul against the ref
// backend's loops (double accumulation): every operand layout, fp32 and bf16 dst, fp32 and bf16
// bias (strided), accumulate, ragged edges (M, N not multiples of the 8 x 48 register block),
// several K blocks, exact equality where the arithmetic is exact, and the same bits on 1 and 2
// threads. Skips where the kernel does not run (no AVX512_BF16, or AMX: oneDNN keeps them).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "backend/cpu/gemm_bf16.h"
#include "kernel_compare.h"
#include "mixp/mixp.h"

namespace mixp {
namespace {
using test::cpu_backend;
using test::ref_backend;

struct Layout {
  bool a_t, b_t;  // operand as the transposed view of a row-major tensor
  bool dst_bf16;
  int bias;  // 0 none, 1 fp32, 2 bf16 (every other element of a longer tensor: stride 2)
  bool accumulate;
};

// Values in [-8, 8] when `ints`, else N(0, 1); all of them exact in bf16.
Tensor values(Shape s, uint64_t seed, bool ints) {
  Generator g(seed);
  Tensor x = ints ? randint(-8, 9, s, g).to(DType::fp32, Round::nearest_even) : randn(s, g);
  return x.to(DType::bf16, Round::nearest_even);
}
Tensor operand(int64_t r, int64_t c, bool t, uint64_t seed, bool ints) {
  const Tensor x = values(t ? Shape{c, r} : Shape{r, c}, seed, ints);
  return t ? x.t() : x;
}

cpu::Bf16Gemm descriptor(const Tensor& a, const Tensor& b, Tensor dst) {
  return cpu::describe_bf16_gemm(dst, a, b, Tensor(), false);
}

bool kernel_runs_here() {
  const Tensor a = operand(512, 64, false, 1, true), b = operand(64, 256, false, 2, true);
  const Tensor d = empty({512, 256});
  return cpu::own_bf16_gemm(descriptor(a, b, d));
}

struct Result {
  Tensor cpu, ref;  // fp32, contiguous
};

bool same_bits(const Tensor& x, const Tensor& y) {
  return x.numel() == y.numel() &&
         std::memcmp(x.data_ptr(), y.data_ptr(), static_cast<size_t>(x.numel()) * 4) == 0;
}

// dst = A . B (+ bias) (+ dst's prior values) on both backends, from the same starting dst.
Result run(int64_t m, int64_t n, int64_t k, const Layout& L, bool ints, uint64_t seed) {
  NoGradGuard ng;
  const Tensor a = operand(m, k, L.a_t, seed, ints), b = operand(k, n, L.b_t, seed + 1, ints);
  Tensor bias;
  if (L.bias == 1) bias = values({n}, seed + 2, ints).to(DType::fp32, Round::nearest_even);
  if (L.bias == 2) bias = values({2 * n}, seed + 2, ints).slice(0, 0, 2 * n, 2);
  const DType dd = L.dst_bf16 ? DType::bf16 : DType::fp32;
  const Tensor start = values({m, n}, seed + 3, ints).to(dd, Round::nearest_even);
  Tensor c = start.clone(), r = start.clone();
  MatmulConfig cfg;
  cfg.compute = DType::bf16;
  cfg.accumulate = L.accumulate;
  EXPECT_TRUE(cpu::own_bf16_gemm(descriptor(a, b, c))) << "the GEMM did not take mixp's kernel";
  cpu_backend().matmul(c, a, b, bias, cfg);
  ref_backend().matmul(r, a, b, bias, cfg);
  return {c.to(DType::fp32, Round::nearest_even).contiguous(),
          r.to(DType::fp32, Round::nearest_even).contiguous()};
}

std::string name(const Layout& L) {
  return std::string("A") + (L.a_t ? "^T" : "") + " B" + (L.b_t ? "^T" : "") +
         (L.dst_bf16 ? " dst bf16" : " dst fp32") +
         (L.bias == 0   ? ""
          : L.bias == 1 ? " bias fp32"
                        : " bias bf16 strided") +
         (L.accumulate ? " accumulate" : "");
}

std::vector<Layout> all_layouts() {
  std::vector<Layout> v;
  for (int at = 0; at < 2; ++at)
    for (int bt = 0; bt < 2; ++bt)
      for (int d16 = 0; d16 < 2; ++d16)
        for (int bias = 0; bias < 3; ++bias)
          for (int acc = 0; acc < 2; ++acc)
            v.push_back({at == 1, bt == 1, d16 == 1, bias, acc == 1});
  return v;
}

class GemmBf16 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kernel_runs_here())
      GTEST_SKIP() << "mixp's bf16 GEMM does not run on this CPU (it needs AVX512_BF16 without "
                      "AMX, and MIXP_CPU_GEMM unset)";
  }
};

// Small integers: every product and partial sum is an integer below 2^24, exact in fp32 in any
// order, so the kernel must give the ref backend's bits (a bf16 dst rounds the same exact value).
TEST_F(GemmBf16, ExactArithmeticGivesTheRefBitsInEveryLayout) {
  for (const Layout& L : all_layouts()) {
    const Result r = run(517, 101, 90, L, true, 11);
    const auto* c = static_cast<const float*>(r.cpu.data_ptr());
    const auto* e = static_cast<const float*>(r.ref.data_ptr());
    int64_t bad = 0;
    for (int64_t i = 0; i < r.cpu.numel(); ++i) bad += c[i] != e[i];
    EXPECT_EQ(bad, 0) << name(L);
  }
}

// Random normal operands: within fp32 accumulation error of the double-accumulated reference
// (1e-5 x k absolute), plus one bf16 ulp for a bf16 dst.
TEST_F(GemmBf16, RandomOperandsMatchTheRefWithinRounding) {
  for (const Layout& L : all_layouts()) {
    const int64_t m = 530, n = 75, k = 188;
    const Result r = run(m, n, k, L, false, 21);
    const auto* c = static_cast<const float*>(r.cpu.data_ptr());
    const auto* e = static_cast<const float*>(r.ref.data_ptr());
    double worst = 0;
    for (int64_t i = 0; i < r.cpu.numel(); ++i) {
      // fp32 accumulation: at most 1e-5 x k off (|partial sums| stay near sqrt(k)); a bf16 dst
      // also one bf16 ulp (2^-7 relative) when that error crosses a rounding boundary.
      const double tol = (L.dst_bf16 ? std::abs(e[i]) * 0x1p-7 : 0.0) + 1e-5 * k;
      worst = std::max(worst, std::abs(double(c[i]) - e[i]) / tol);
    }
    EXPECT_LE(worst, 1.0) << name(L);
  }
}

// K = 9000 runs as several K blocks (partial sums in fp32, a bf16 dst rounded once at the end).
TEST_F(GemmBf16, SeveralKBlocksAccumulateInFp32) {
  for (bool d16 : {false, true}) {
    const Layout L{false, true, d16, 1, false};
    const Result r = run(512, 40, 9000, L, true, 31);
    EXPECT_TRUE(same_bits(r.cpu, r.ref)) << name(L);
  }
}

// Column slices (gemm_bf16_columns: a wide bf16 dst over several K blocks) give the same bits as
// one GEMM, with either bias dtype and either layout of B.
TEST_F(GemmBf16, ColumnSlicesGiveTheSameBits) {
  NoGradGuard ng;
  for (int bias_kind : {1, 2}) {
    for (bool b_t : {false, true}) {
      const int64_t m = 64, n = 800, k = 4098;
      const Tensor a = operand(m, k, true, 51, false), b = operand(k, n, b_t, 52, false);
      Tensor bias = values({2 * n}, 53, false);
      bias = bias_kind == 1 ? bias.slice(0, 0, n).to(DType::fp32, Round::nearest_even)
                            : bias.slice(0, 0, 2 * n, 2);
      Tensor whole = Tensor::empty({m, n}, {.dtype = DType::bf16}), sliced = whole.clone();
      cpu::gemm_bf16(cpu::describe_bf16_gemm(whole, a, b, bias, false));
      cpu::gemm_bf16_columns(cpu::describe_bf16_gemm(sliced, a, b, bias, false), 768);
      EXPECT_EQ(std::memcmp(whole.data_ptr(), sliced.data_ptr(), static_cast<size_t>(m * n) * 2), 0)
          << "bias " << bias_kind << " b_t " << b_t;
    }
  }
}

// The threads split the rows; no output's sum depends on how many there are.
TEST_F(GemmBf16, OneAndTwoThreadsGiveTheSameBits) {
  const int before = get_num_threads();
  for (const Layout& L :
       {Layout{false, true, true, 2, false}, Layout{true, false, false, 0, true}}) {
    set_num_threads(1);
    const Result one = run(1000, 200, 300, L, false, 41);
    set_num_threads(2);
    const Result two = run(1000, 200, 300, L, false, 41);
    EXPECT_TRUE(same_bits(one.cpu, two.cpu)) << name(L);
  }
  set_num_threads(before);
}

// Which GEMMs take the kernel: GPT-2's, not small ones, not an odd K, not a forward of 256 tokens.
TEST_F(GemmBf16, TakesLargeEvenKGemmsOnly) {
  auto takes = [](int64_t m, int64_t n, int64_t k, bool a_t) {
    const Tensor a = operand(m, k, a_t, 1, true), b = operand(k, n, true, 2, true);
    const Tensor d = empty({m, n});
    return cpu::own_bf16_gemm(descriptor(a, b, d));
  };
  EXPECT_TRUE(takes(2048, 2304, 768, false));   // GPT-2 qkv forward, B8 T256
  EXPECT_TRUE(takes(2304, 768, 256, true));     // its weight gradient at B4 T64
  EXPECT_FALSE(takes(256, 2304, 768, false));   // forward at B4 T64: oneDNN is faster
  EXPECT_FALSE(takes(2048, 2304, 767, false));  // odd K
  EXPECT_FALSE(takes(64, 64, 64, false));       // small
}

}  // namespace
}  // namespace mixp
