// Finite-difference gradient checks in fp64 for every differentiable op (docs/architecture.md 6.4),
// on both backends (the cpu backend runs fp64 through its ref fallbacks, so this checks the ref
// kernels and the front ends' backward formulas).
#include <gtest/gtest.h>

#include "mixp/autograd/gradcheck.h"
#include "mixp/mixp.h"

namespace mixp {
namespace {
using V = std::vector<Tensor>;

Tensor r64(const Shape& s, uint64_t seed, double scale = 1.0, double shift = 0.0) {
  Generator g(seed);
  Tensor t = normal(s, shift, scale, g, {.dtype = DType::fp64});
  return t.requires_grad_();
}
Tensor pos64(const Shape& s, uint64_t seed) {
  Generator g(seed);
  return uniform(s, 0.5, 2.0, g, {.dtype = DType::fp64}).requires_grad_();
}

void check(const char* what, const std::function<Tensor(const V&)>& fn, const V& inputs,
           GradcheckOptions opt = {}) {
  for (BackendKind kind : {BackendKind::ref, BackendKind::cpu}) {
    BackendGuard g(kind);
    std::vector<Tensor> fresh;
    for (const Tensor& t : inputs) {
      if (!t.defined()) {
        fresh.push_back(t);
        continue;
      }
      Tensor c = t.detach().clone();
      if (t.requires_grad()) c.requires_grad_();
      fresh.push_back(c);
    }
    const GradcheckResult r = gradcheck(fn, fresh, opt);
    EXPECT_TRUE(r.ok) << what << " on " << to_string(kind) << ": " << r.message;
  }
}

TEST(Gradcheck, Pointwise) {
  check("add bcast", [](const V& v) { return add(v[0], v[1]); }, {r64({3, 4}, 1), r64({4}, 2)});
  check("sub bcast", [](const V& v) { return sub(v[0], v[1]); }, {r64({3, 1}, 3), r64({1, 4}, 4)});
  check("mul bcast", [](const V& v) { return mul(v[0], v[1]); },
        {r64({2, 3, 4}, 5), r64({3, 1}, 6)});
  check("div bcast", [](const V& v) { return div(v[0], v[1]); }, {r64({3, 4}, 7), pos64({4}, 8)});
  check("add_scalar", [](const V& v) { return add(v[0], 3.0); }, {r64({5}, 9)});
  check("mul_scalar", [](const V& v) { return mul(v[0], -2.0); }, {r64({5}, 10)});
  check("pow", [](const V& v) { return pow(v[0], 2.5); }, {pos64({5}, 11)});
  check("rsub", [](const V& v) { return rsub(1.0, v[0]); }, {r64({5}, 12)});
  check("rdiv", [](const V& v) { return rdiv(2.0, v[0]); }, {pos64({5}, 13)});
  check("neg", [](const V& v) { return neg(v[0]); }, {r64({5}, 14)});
  check("exp", [](const V& v) { return exp(v[0]); }, {r64({5}, 15)});
  check("log", [](const V& v) { return log(v[0]); }, {pos64({5}, 16)});
  check("sqrt", [](const V& v) { return sqrt(v[0]); }, {pos64({5}, 17)});
  // relu: keep inputs away from the kink at 0
  check("relu", [](const V& v) { return relu(v[0]); },
        {from_vector(std::vector<double>{-2, -0.5, 0.3, 1.7}, {4}, {.dtype = DType::fp64})
             .requires_grad_()});
  check("gelu", [](const V& v) { return gelu(v[0]); }, {r64({7}, 18, 2.0)});
  check("gelu tanh", [](const V& v) { return gelu(v[0], GeluApprox::tanh); }, {r64({7}, 118, 2.0)});
  check("sin", [](const V& v) { return sin(v[0]); }, {r64({7}, 119, 3.0)});
  check("cos", [](const V& v) { return cos(v[0]); }, {r64({7}, 120, 3.0)});
  check("tanh", [](const V& v) { return tanh(v[0]); }, {r64({7}, 19)});
  check("sigmoid", [](const V& v) { return sigmoid(v[0]); }, {r64({7}, 20)});
  check("dropout", [](const V& v) { return dropout(v[0], 0.4, true, uint64_t{3}); },
        {r64({20}, 21)});
  check("to fp32 and back",
        [](const V& v) { return v[0].to(DType::fp32, Round::nearest_even).to(DType::fp64); },
        {r64({4}, 22)}, {.eps = 1e-3, .atol = 1e-5, .rtol = 1e-4});
}

TEST(Gradcheck, Reductions) {
  check("sum all", [](const V& v) { return sum(v[0]); }, {r64({3, 4}, 23)});
  check("sum dims", [](const V& v) { return sum(v[0], {0, 2}); }, {r64({2, 3, 4}, 24)});
  check("mean keepdim", [](const V& v) { return mean(v[0], {1}, true); }, {r64({2, 3, 4}, 25)});
  check("max dim", [](const V& v) { return max(v[0], {1}); }, {r64({3, 5}, 26)});
  check("max all", [](const V& v) { return max(v[0]); }, {r64({3, 5}, 27)});
}

TEST(Gradcheck, Linalg) {
  check("matmul", [](const V& v) { return matmul(v[0], v[1]); },
        {r64({3, 4}, 28), r64({4, 5}, 29)});
  check("matmul batched-lhs", [](const V& v) { return matmul(v[0], v[1]); },
        {r64({2, 3, 4}, 30), r64({4, 2}, 31)});
  check("bmm", [](const V& v) { return bmm(v[0], v[1]); },
        {r64({2, 3, 4}, 32), r64({2, 4, 2}, 33)});
  check("linear", [](const V& v) { return linear(v[0], v[1], v[2]); },
        {r64({3, 4}, 34), r64({5, 4}, 35), r64({5}, 36)});
  check("linear relu", [](const V& v) { return linear(v[0], v[1], v[2], Activation::relu); },
        {r64({3, 4}, 37), r64({5, 4}, 38), r64({5}, 39)});
  check("linear gelu", [](const V& v) { return linear(v[0], v[1], v[2], Activation::gelu); },
        {r64({3, 4}, 40), r64({5, 4}, 41), r64({5}, 42)});
  check("conv2d", [](const V& v) { return conv2d(v[0], v[1], v[2], 1, 1); },
        {r64({2, 2, 5, 5}, 43), r64({3, 2, 3, 3}, 44), r64({3}, 45)});
  check("conv2d stride2", [](const V& v) { return conv2d(v[0], v[1], Tensor(), 2, 0); },
        {r64({1, 2, 6, 7}, 46), r64({2, 2, 3, 2}, 47)});
  check("conv1d", [](const V& v) { return conv1d(v[0], v[1], v[2], 1, 1); },
        {r64({2, 2, 7}, 121), r64({3, 2, 3}, 122), r64({3}, 123)});
  check("conv1d stride2 dilation2",
        [](const V& v) { return conv1d(v[0], v[1], Tensor(), 2, 2, 2); },
        {r64({1, 3, 9}, 124), r64({2, 3, 3}, 125)});
  check("attention causal",
        [](const V& v) { return scaled_dot_product_attention(v[0], v[1], v[2], true); },
        {r64({1, 2, 4, 3}, 48), r64({1, 2, 4, 3}, 49), r64({1, 2, 4, 3}, 50)});
  check("attention full",
        [](const V& v) { return scaled_dot_product_attention(v[0], v[1], v[2], false); },
        {r64({2, 1, 3, 2}, 51), r64({2, 1, 5, 2}, 52), r64({2, 1, 5, 2}, 53)});
  check("attention packed qkv causal",
        [](const V& v) { return attention_packed_qkv(v[0], 2, true); }, {r64({2, 4, 3 * 4}, 126)});
  check("attention packed qkv full",
        [](const V& v) { return attention_packed_qkv(v[0], 3, false); }, {r64({1, 3, 3 * 6}, 127)});
  check("lstm_cell",
        [](const V& v) {
          auto [h, c] = lstm_cell(v[0], v[1], v[2], v[3], v[4], v[5], v[6]);
          return add(h, mul(c, 0.5));
        },
        {r64({2, 3}, 54), r64({2, 2}, 55), r64({2, 2}, 56), r64({8, 3}, 57), r64({8, 2}, 58),
         r64({8}, 59), r64({8}, 60)});
}

TEST(Gradcheck, NormsAndLosses) {
  check("softmax", [](const V& v) { return softmax(v[0], 1); }, {r64({3, 5}, 61)});
  check("softmax dim0", [](const V& v) { return softmax(v[0], 0); }, {r64({3, 5}, 62)});
  check("log_softmax", [](const V& v) { return log_softmax(v[0], -1); }, {r64({3, 5}, 63)});
  check("layer_norm", [](const V& v) { return layer_norm(v[0], {5}, v[1], v[2]); },
        {r64({3, 5}, 64), r64({5}, 65), r64({5}, 66)});
  check("layer_norm 2d", [](const V& v) { return layer_norm(v[0], {2, 3}); }, {r64({2, 2, 3}, 67)});
  check("batch_norm train",
        [](const V& v) { return batch_norm(v[0], Tensor(), Tensor(), v[1], v[2], true); },
        {r64({4, 3, 2, 2}, 68), r64({3}, 69), r64({3}, 70)});
  check("batch_norm 1d",
        [](const V& v) { return batch_norm(v[0], Tensor(), Tensor(), v[1], v[2], true); },
        {r64({5, 3}, 71), r64({3}, 72), r64({3}, 73)});
  const Tensor rm = from_vector(std::vector<double>{0.1, -0.2, 0.3}, {3}, {.dtype = DType::fp64});
  const Tensor rv = from_vector(std::vector<double>{0.5, 1.5, 2.0}, {3}, {.dtype = DType::fp64});
  check("batch_norm eval",
        [rm, rv](const V& v) { return batch_norm(v[0], rm, rv, v[1], v[2], false); },
        {r64({4, 3, 2, 2}, 74), r64({3}, 75), r64({3}, 76)});
  const Tensor tgt = from_vector(std::vector<int64_t>{0, 3, 1}, {3});
  check("cross_entropy", [tgt](const V& v) { return cross_entropy(v[0], tgt); }, {r64({3, 4}, 77)});
  // The fused classifier on an intermediate (its gradient is written over the logits' buffer),
  // 4 of 6 columns classes: the padded ones get a zero gradient, as finite differences do.
  check("cross_entropy_in_place",
        [tgt](const V& v) { return cross_entropy_in_place(mul(v[0], 1.0), tgt, 4); },
        {r64({3, 6}, 77)});
  check("cross_entropy_in_place leaf",
        [tgt](const V& v) { return cross_entropy_in_place(v[0], tgt, 4); }, {r64({3, 6}, 78)});
  check("mse", [](const V& v) { return mse_loss(v[0], v[1]); }, {r64({3, 4}, 78), r64({3, 4}, 79)});
}

TEST(Gradcheck, PoolingEmbedding) {
  // distinct values so max pooling has no ties within eps
  check("max_pool2d", [](const V& v) { return max_pool2d(v[0], 2); }, {r64({1, 2, 4, 4}, 80)});
  check("max_pool2d pad", [](const V& v) { return max_pool2d(v[0], 3, 2, 1); },
        {r64({1, 1, 5, 5}, 81)});
  check("avg_pool2d", [](const V& v) { return avg_pool2d(v[0], 2); }, {r64({1, 2, 4, 4}, 82)});
  check("avg_pool2d pad", [](const V& v) { return avg_pool2d(v[0], 3, 1, 1); },
        {r64({1, 1, 4, 4}, 83)});
  const Tensor idx = from_vector(std::vector<int64_t>{2, 0, 2, 1}, {2, 2});
  check("embedding", [idx](const V& v) { return embedding(idx, v[0]); }, {r64({3, 4}, 84)});
}

TEST(Gradcheck, Layout) {
  check("reshape",
        [](const V& v) {
          return mul(v[0].reshape({6, 2}), v[0].reshape({6, 2}));
        },
        {r64({3, 4}, 85)});
  check("transpose", [](const V& v) { return matmul(v[0].t(), v[1]); },
        {r64({4, 3}, 86), r64({4, 2}, 87)});
  check("permute",
        [](const V& v) {
          return mul(v[0].permute({2, 0, 1}), 3.0);
        },
        {r64({2, 3, 4}, 88)});
  check("slice", [](const V& v) { return mul(v[0].slice(1, 1, 4, 2), 2.0); }, {r64({3, 5}, 89)});
  check("select", [](const V& v) { return mul(v[0].select(0, 1), v[0].select(0, 2)); },
        {r64({3, 5}, 90)});
  check("expand",
        [](const V& v) {
          return mul(v[0].expand({3, 4}), v[1]);
        },
        {r64({1, 4}, 91), r64({3, 4}, 92)});
  check("unsqueeze/squeeze", [](const V& v) { return v[0].unsqueeze(1).squeeze(1).flatten(); },
        {r64({2, 3}, 93)});
  check("cat",
        [](const V& v) {
          return cat({v[0], v[1], v[0]}, 1);
        },
        {r64({2, 3}, 94), r64({2, 1}, 95)});
  check("stack",
        [](const V& v) {
          return stack({v[0], v[1]}, 1);
        },
        {r64({2, 3}, 96), r64({2, 3}, 97)});
  check("chunk",
        [](const V& v) {
          auto c = chunk(v[0], 2, 1);
          return mul(c[0], c[1]);
        },
        {r64({2, 4}, 98)});
  check("contiguous", [](const V& v) { return v[0].t().contiguous(); }, {r64({2, 3}, 99)});
}

}  // namespace
}  // namespace mixp
