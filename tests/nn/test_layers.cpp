// Layers: forward shapes, fp64 finite-difference gradients w.r.t. parameters and inputs,
// BatchNorm2d and Dropout train/eval behaviour, attention against an explicit formula.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "mixp/nn/nn.h"
#include "nn/nn_test_util.h"

namespace mixp::nn {
namespace {

using testing::check_param_grads;
using testing::to_fp64;

Tensor r64(const Shape& s, uint64_t seed, bool grad = true) {
  Generator g(seed);
  Tensor t = randn(s, g, {.dtype = DType::fp64});
  return grad ? t.requires_grad_() : t;
}

TEST(Layers, LinearShapesAndGradients) {
  Generator g(1);
  Linear fc(4, 3, g);
  EXPECT_EQ(fc.forward(ones({2, 5, 4})).shape(), (Shape{2, 5, 3}));
  EXPECT_THROW(fc.forward(ones({2, 5})), std::invalid_argument);
  to_fp64(fc);
  const Tensor x = r64({5, 4}, 2);
  check_param_grads(fc, [&] { return fc.forward(x); }, {x});
  Linear nob(4, 3, g, {.bias = false, .activation = Activation::relu});
  EXPECT_EQ(nob.named_parameters().size(), 1u);
  const std::vector<double> relu_out =
      nob.forward(r64({6, 4}, 3, false).to(DType::fp32, Round::nearest_even)).to_double_vector();
  EXPECT_GE(*std::min_element(relu_out.begin(), relu_out.end()), 0.0);  // fused ReLU
}

TEST(Layers, Conv2dBatchNormPoolGradients) {
  Generator g(4);
  Sequential net;
  net.add("conv", std::make_shared<Conv2d>(2, 3, 3, g, Conv2dOptions{.padding = 1}))
      .add("bn", std::make_shared<BatchNorm2d>(3))
      .add("relu", std::make_shared<ReLU>())
      .add("pool", std::make_shared<MaxPool2d>(2))
      .add("flatten", std::make_shared<Flatten>());
  EXPECT_EQ(net.forward(ones({2, 2, 6, 6})).shape(), (Shape{2, 3 * 3 * 3}));
  to_fp64(net);
  const Tensor x = r64({2, 2, 4, 4}, 5);
  check_param_grads(net, [&] { return net.forward(x); }, {x});
  Conv2d strided(1, 2, 3, g, {.stride = 2, .padding = 0, .bias = false});
  EXPECT_EQ(strided.forward(ones({1, 1, 7, 7})).shape(), (Shape{1, 2, 3, 3}));
  EXPECT_THROW(strided.forward(ones({1, 2, 7, 7})), std::invalid_argument);
}

TEST(Layers, Conv1dShapesAndGradients) {
  Generator g(40);
  Conv1d conv(3, 4, 3, g, {.padding = 1});
  EXPECT_EQ(conv.kind(), "conv1d");
  EXPECT_EQ(conv.weight().shape(), (Shape{4, 3, 3}));
  EXPECT_EQ(conv.num_parameters(), 4 * 3 * 3 + 4);
  EXPECT_EQ(conv.forward(ones({2, 3, 10})).shape(), (Shape{2, 4, 10}));
  EXPECT_THROW(conv.forward(ones({2, 4, 10})), std::invalid_argument);
  EXPECT_THROW(conv.forward(ones({2, 3, 10, 1})), std::invalid_argument);
  // PyTorch's init bound: 1/sqrt(fan_in) = 1/3 for the bias, kaiming a=sqrt(5) the same here
  for (double v : conv.weight().to_double_vector()) EXPECT_LE(std::fabs(v), 1.0 / 3.0 + 1e-7);
  Conv1d dil(2, 2, 3, g, {.stride = 2, .padding = 2, .dilation = 2, .bias = false});
  EXPECT_EQ(dil.named_parameters().size(), 1u);
  EXPECT_EQ(dil.forward(ones({1, 2, 9})).shape(), (Shape{1, 2, 5}));
  Sequential net;
  net.add("conv", std::make_shared<Conv1d>(2, 3, 3, g, Conv1dOptions{.stride = 2}))
      .add("gelu", std::make_shared<GELU>())
      .add("flatten", std::make_shared<Flatten>());
  to_fp64(net);
  const Tensor x = r64({2, 2, 9}, 41);
  check_param_grads(net, [&] { return net.forward(x); }, {x});
}

TEST(Layers, GeluModuleIsExactByDefault) {
  const Tensor x = from_vector(std::vector<double>{-2, -0.5, 0.5, 2}, {4});
  GELU exact, approx(GeluApprox::tanh);
  EXPECT_EQ(exact.approximate(), GeluApprox::none);
  EXPECT_EQ(exact.forward(x).to_double_vector(), gelu(x).to_double_vector());
  EXPECT_EQ(approx.forward(x).to_double_vector(), gelu(x, GeluApprox::tanh).to_double_vector());
  EXPECT_NE(exact.forward(x).to_double_vector(), approx.forward(x).to_double_vector());
  EXPECT_THAT(exact.str(), ::testing::HasSubstr("approximate='none'"));
  EXPECT_THAT(approx.str(), ::testing::HasSubstr("approximate='tanh'"));
}

TEST(Layers, LayerNormEmbeddingGradients) {
  Generator g(6);
  LayerNorm ln(5);
  to_fp64(ln);
  {
    NoGradGuard ng;  // non-trivial affine parameters
    Tensor w = ln.weight(), b = ln.bias();
    w.copy_(r64({5}, 7, false));
    b.copy_(r64({5}, 8, false));
  }
  const Tensor x = r64({3, 5}, 9);
  check_param_grads(ln, [&] { return ln.forward(x); }, {x});
  Embedding emb(7, 4, g);
  to_fp64(emb);
  const Tensor idx = from_vector(std::vector<int64_t>{0, 3, 3, 6, 1, 0}, {2, 3});
  EXPECT_EQ(emb.forward(idx).shape(), (Shape{2, 3, 4}));
  check_param_grads(emb, [&] { return emb.forward(idx); });
  EXPECT_THROW(emb.forward(ones({2})), std::invalid_argument);  // float indices
}

TEST(Layers, AttentionMatchesExplicitFormula) {
  Generator g(10);
  const int64_t B = 2, T = 5, C = 8, H = 2, D = C / H;
  CausalSelfAttention attn(C, H, g);
  to_fp64(attn);
  const Tensor x = r64({B, T, C}, 11);
  const Tensor y = attn.forward(x);
  ASSERT_EQ(y.shape(), (Shape{B, T, C}));
  // Explicit: per head, softmax(q k^T / sqrt(D) with -inf above the diagonal) v.
  const std::vector<double> qkv =
      linear(x, attn.qkv().weight(), attn.qkv().bias()).to_double_vector();  // [B, T, 3C]
  std::vector<double> merged(static_cast<size_t>(B * T * C));
  auto at = [&](int64_t b, int64_t t, int64_t which, int64_t h, int64_t d) {
    return qkv[static_cast<size_t>(((b * T + t) * 3 + which) * C + h * D + d)];
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> s(static_cast<size_t>(i + 1));
        double mx = -1e300, z = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += at(b, i, 0, h, d) * at(b, j, 1, h, d);
          s[static_cast<size_t>(j)] = dot / std::sqrt(static_cast<double>(D));
          mx = std::max(mx, s[static_cast<size_t>(j)]);
        }
        for (auto& v : s) z += (v = std::exp(v - mx));
        for (int64_t d = 0; d < D; ++d) {
          double acc = 0;
          for (int64_t j = 0; j <= i; ++j) acc += s[static_cast<size_t>(j)] / z * at(b, j, 2, h, d);
          merged[static_cast<size_t>((b * T + i) * C + h * D + d)] = acc;
        }
      }
  const std::vector<double> want = linear(from_vector(merged, {B, T, C}, {.dtype = DType::fp64}),
                                          attn.proj().weight(), attn.proj().bias())
                                       .to_double_vector();
  const std::vector<double> got = y.to_double_vector();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << i;
  check_param_grads(
      attn, [&] { return attn.forward(x); }, {x}, 1e-6, 1e-6, 1e-5);
  EXPECT_THROW(CausalSelfAttention(10, 3, g), std::invalid_argument);
}

TEST(Layers, TransformerBlockGradients) {
  Generator g(12);
  TransformerBlock blk(8, 2, 16, g);
  std::vector<std::string> kinds;
  for (auto& [n, m] : blk.named_modules()) kinds.push_back(n + ":" + m->kind());
  EXPECT_THAT(kinds, ::testing::ElementsAre(":block", "ln1:layer_norm", "attn:attention",
                                            "attn.qkv:linear", "attn.proj:linear", "ln2:layer_norm",
                                            "mlp:mlp", "mlp.fc:linear", "mlp.proj:linear"));
  to_fp64(blk);
  const Tensor x = r64({1, 3, 8}, 13);
  check_param_grads(blk, [&] { return blk.forward(x); }, {x});
}

TEST(Layers, LstmShapesStateAndGradients) {
  Generator g(14);
  LSTM lstm(3, 4, g, {.num_layers = 2});
  std::vector<std::string> n;
  for (auto& [name, t] : lstm.named_parameters()) n.push_back(name);
  EXPECT_THAT(n,
              ::testing::ElementsAre("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0",
                                     "weight_ih_l1", "weight_hh_l1", "bias_ih_l1", "bias_hh_l1"));
  EXPECT_EQ(lstm.num_parameters(), (16 * 3 + 16 * 4 + 32) + (16 * 4 + 16 * 4 + 32));
  to_fp64(lstm);
  const Tensor x = r64({5, 2, 3}, 15);  // [T, N, I]
  const LstmOutput out = lstm.forward_with_state(x);
  EXPECT_EQ(out.output.shape(), (Shape{5, 2, 4}));
  EXPECT_EQ(out.h.shape(), (Shape{2, 2, 4}));
  EXPECT_EQ(out.output.select(0, 4).to_double_vector(), out.h.select(0, 1).to_double_vector());
  check_param_grads(lstm, [&] { return lstm.forward(x); }, {x});
  // Continuing from the returned state equals running the whole sequence at once.
  const LstmOutput first = lstm.forward_with_state(x.slice(0, 0, 3));
  const LstmOutput rest = lstm.forward_with_state(x.slice(0, 3, 5), first.h, first.c);
  const std::vector<double> a = rest.output.to_double_vector(),
                            b = out.output.slice(0, 3, 5).to_double_vector();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-14);
  LSTM bf(3, 4, g, {.batch_first = true});
  EXPECT_EQ(bf.forward(ones({2, 5, 3})).shape(), (Shape{2, 5, 4}));
}

TEST(Layers, BatchNormTrainAndEval) {
  BatchNorm2d bn(2);
  // Channel 0 holds 1..8, channel 1 holds 10 * (1..8), over N=2, H=2, W=2.
  std::vector<double> v;
  for (int n = 0; n < 2; ++n)
    for (int c = 0; c < 2; ++c)
      for (int i = 0; i < 4; ++i) v.push_back((c == 0 ? 1.0 : 10.0) * (n * 4 + i + 1));
  const Tensor x = from_vector(v, {2, 2, 2, 2});
  const Tensor y = bn.forward(x);
  // Training: per-channel batch statistics (biased variance) -> mean 0, variance 1.
  for (int c = 0; c < 2; ++c) {
    const std::vector<double> yc = y.select(1, c).contiguous().to_double_vector();
    double m = 0, s = 0;
    for (double e : yc) m += e / 8;
    for (double e : yc) s += (e - m) * (e - m) / 8;
    EXPECT_NEAR(m, 0.0, 1e-6);
    EXPECT_NEAR(s, 1.0, 1e-3);  // eps 1e-5 against variances 5.25 and 525
  }
  // Running stats: 0.9 * init + 0.1 * batch (unbiased variance 6 for 1..8).
  EXPECT_NEAR(bn.running_mean().at({0}), 0.1 * 4.5, 1e-6);
  EXPECT_NEAR(bn.running_mean().at({1}), 0.1 * 45.0, 1e-5);
  EXPECT_NEAR(bn.running_var().at({0}), 0.9 + 0.1 * 6.0, 1e-6);
  EXPECT_NEAR(bn.running_var().at({1}), 0.9 + 0.1 * 600.0, 1e-4);
  // Eval: the running statistics, and they stay put.
  bn.eval();
  const Tensor ye = bn.forward(x);
  EXPECT_NEAR(ye.at({0, 0, 0, 0}), (1.0 - 0.45) / std::sqrt(1.5 + 1e-5), 1e-5);
  EXPECT_NEAR(ye.at({1, 1, 1, 1}), (80.0 - 4.5) / std::sqrt(60.9 + 1e-5), 1e-4);
  EXPECT_NEAR(bn.running_mean().at({0}), 0.45, 1e-6);
  EXPECT_EQ(bn.named_buffers().size(), 2u);
}

TEST(Layers, DropoutTrainAndEval) {
  Dropout d(0.25, 7);
  const Tensor x = ones({10000});
  const std::vector<double> y = d.forward(x).to_double_vector();
  int zeros_n = 0;
  for (double v : y) {
    if (v == 0)
      ++zeros_n;
    else
      EXPECT_NEAR(v, 1.0 / 0.75, 1e-6);
  }
  EXPECT_NEAR(zeros_n / 10000.0, 0.25, 0.03);
  // A second forward draws a new mask.
  EXPECT_NE(d.forward(x).to_double_vector(), y);
  d.eval();
  EXPECT_TRUE(d.forward(x).is_same(x));
  EXPECT_THROW(Dropout(1.0), std::invalid_argument);
  // Gradient: the same mask scales the gradient.
  d.train();
  Tensor xr = ones({64}).requires_grad_();
  const Tensor out = d.forward(xr);
  sum(out).backward();
  EXPECT_EQ(xr.grad().to_double_vector(), out.detach().to_double_vector());
}

}  // namespace
}  // namespace mixp::nn
