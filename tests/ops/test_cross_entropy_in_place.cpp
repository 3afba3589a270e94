// The fused classifier (ops.h, cross_entropy_in_place): the cpu kernels against the ref oracle,
// bit-identity with cross_entropy on the sliced logits (what the GPT computed before it), the
// padded columns, the gradient written over the logits' buffer, and the errors.
#include <gtest/gtest.h>

#include <cstring>

#include "ops/op_test_util.h"

namespace mixp::testing {
namespace {
using V = std::vector<Tensor>;

// Bits of every element, widened exactly to fp64 (equal doubles <=> equal bits here: no NaN).
std::vector<double> values(const Tensor& t) {
  return t.contiguous().to_double_vector();
}

// The op on an intermediate (what a model hands it: a head's output), so backward writes in place.
Tensor fused(const Tensor& logits, const Tensor& tgt, int64_t classes) {
  return cross_entropy_in_place(mul(logits, 1.0), tgt, classes);
}

TEST(CrossEntropyInPlace, CpuMatchesRef) {
  Generator g(7);
  const Tensor tgt = randint(0, 61, {37}, g);
  for (DType dt : {DType::fp32, DType::bf16, DType::fp16}) {
    SCOPED_TRACE(name(dt));
    const Tensor logits = rnd({37, 128}, 8, dt, 3.0);
    const double tol = dt == DType::fp32 ? kTolFp32 : kTolBf16;
    expect_cpu_matches_ref(
        "padded 61 of 128", [tgt](const V& v) { return fused(v[0], tgt, 61); }, {logits}, tol);
    expect_cpu_matches_ref(
        "leaf (gradient into a copy)",
        [tgt](const V& v) { return cross_entropy_in_place(v[0], tgt, 61); }, {logits}, tol);
    const Tensor tgt_all = randint(0, 128, {37}, g).to(DType::int32, Round::nearest_even);
    expect_cpu_matches_ref(
        "unpadded, int32 targets", [tgt_all](const V& v) { return fused(v[0], tgt_all, 128); },
        {logits}, tol);
  }
}

// The loss and the gradient are bit for bit those of the unfused path the GPT took before: slice
// the classes, a contiguous copy, widen 16-bit logits to fp32, cross_entropy, and back. The
// upstream gradient 1/3 (not a power of two, as under gradient accumulation) is applied the same
// way in both.
TEST(CrossEntropyInPlace, BitIdenticalToCrossEntropyOnTheSlice) {
  Generator g(9);
  const int64_t N = 53, Cp = 192, C = 157;
  const Tensor tgt = randint(0, C, {N}, g);
  for (DType dt : {DType::fp32, DType::bf16, DType::fp16}) {
    SCOPED_TRACE(name(dt));
    const Tensor x = rnd({N, Cp}, 10, dt, 4.0);
    Tensor a = x.detach().clone().requires_grad_();
    Tensor b = x.detach().clone().requires_grad_();
    Tensor la = fused(a, tgt, C);
    Tensor sliced = mul(b, 1.0).slice(1, 0, C).contiguous();
    if (dt != DType::fp32) sliced = sliced.to(DType::fp32, Round::nearest_even);
    Tensor lb = cross_entropy(sliced, tgt);
    ASSERT_EQ(la.dtype(), DType::fp32);
    EXPECT_EQ(values(la), values(lb));
    mul(la, 1.0 / 3.0).backward();
    mul(lb, 1.0 / 3.0).backward();
    EXPECT_EQ(values(a.grad()), values(b.grad()));
    // The padded columns: exactly zero gradient.
    const std::vector<double> ga = values(a.grad());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = C; c < Cp; ++c) ASSERT_EQ(ga[size_t(n * Cp + c)], 0.0) << n << " " << c;
  }
}

TEST(CrossEntropyInPlace, PaddedColumnsNeverEnterTheSoftmax) {
  const Tensor tgt = from_vector(std::vector<int64_t>{0, 2}, {2});
  Tensor x = rnd({2, 8}, 11);
  Tensor y = x.clone();
  {
    NoGradGuard ng;
    y.slice(1, 3, 8).fill_(1e4);  // would dominate every softmax if it were read
  }
  EXPECT_EQ(cross_entropy_in_place(x, tgt, 3).item(), cross_entropy_in_place(y, tgt, 3).item());
  EXPECT_EQ(cross_entropy_in_place(x, tgt, 3).item(),
            cross_entropy(x.slice(1, 0, 3).contiguous(), tgt).item());
}

// The gradient goes over the logits' buffer when nothing else holds it: backward then allocates
// one tensor of the logits' size (the upstream op's input gradient), not two.
TEST(CrossEntropyInPlace, GradientReusesTheLogitsBuffer) {
  const int64_t N = 512, Cp = 1024;  // 2 MiB: large blocks, counted exactly
  const int64_t bytes = N * Cp * 4;
  Generator g(12);
  const Tensor tgt = randint(0, 1000, {N}, g);
  for (bool hold : {false, true}) {
    SCOPED_TRACE(hold ? "caller holds the logits" : "intermediate logits");
    Tensor x = rnd({N, Cp}, 13).requires_grad_();
    Tensor logits = mul(x, 1.0);
    const std::vector<double> before = values(logits);
    Tensor loss = cross_entropy_in_place(logits, tgt, 1000);
    if (!hold) logits = Tensor();
    const int64_t live = allocator_stats().allocated_bytes;
    reset_peak_memory();
    loss.backward();
    const int64_t extra = allocator_stats().peak_allocated_bytes - live;
    RecordProperty(hold ? "extra_held" : "extra_intermediate", std::to_string(extra));
    if (hold) {
      EXPECT_GT(extra, bytes + bytes / 2);
      EXPECT_EQ(values(logits), before) << "the caller's logits were overwritten";
    } else {
      EXPECT_LT(extra, bytes + bytes / 2) << "backward allocated a second logits-sized tensor";
    }
    ASSERT_TRUE(x.grad().defined());
  }
}

TEST(CrossEntropyInPlace, RetainGraphGivesTheSameGradientTwice) {
  const Tensor tgt = from_vector(std::vector<int64_t>{1, 4, 0}, {3});
  Tensor x = rnd({3, 8}, 14).requires_grad_();
  Tensor loss = fused(x, tgt, 5);
  loss.backward(Tensor(), /*retain_graph=*/true);
  const std::vector<double> g1 = values(x.grad());
  x.set_grad(Tensor());
  loss.backward();
  EXPECT_EQ(values(x.grad()), g1);
}

TEST(CrossEntropyInPlace, ClearErrors) {
  const Tensor tgt = from_vector(std::vector<int64_t>{1, 2}, {2});
  const Tensor x = rnd({2, 8}, 15);
  auto msg = [](auto&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const Tensor strided = rnd({8, 2}, 16).t();  // [2, 8], not contiguous
  EXPECT_NE(msg([&] { cross_entropy_in_place(strided, tgt, 2); }).find("contiguous"),
            std::string::npos)
      << msg([&] { cross_entropy_in_place(strided, tgt, 2); });
  EXPECT_NE(msg([&] { cross_entropy_in_place(x, tgt, 9); }).find("classes must be in [1, 8]"),
            std::string::npos);
  EXPECT_NE(msg([&] { cross_entropy_in_place(x, tgt, 2); }).find("target 2 out of [0, 2)"),
            std::string::npos);
  const Tensor ftgt = from_vector(std::vector<float>{1, 2}, {2});
  EXPECT_NE(msg([&] { cross_entropy_in_place(x, ftgt, 4); }).find("int64 or int32"),
            std::string::npos)
      << msg([&] { cross_entropy_in_place(x, ftgt, 4); });
}

}  // namespace
}  // namespace mixp::testing
