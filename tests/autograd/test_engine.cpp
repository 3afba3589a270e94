// Autograd engine behaviour: accumulation, retain_graph, NoGradGuard, detach, diamonds,
// checkpoint (same gradients, lower peak memory), dtype of gradients, and that gradcheck catches
// a wrong backward.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "mixp/autograd/gradcheck.h"
#include "mixp/mixp.h"
#include "ops/dispatch.h"

namespace mixp {
namespace {

Tensor vec64(std::vector<double> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return from_vector(v, {n}, {.dtype = DType::fp64});
}

TEST(Autograd, AccumulatesAcrossBackwardCalls) {
  Tensor w = vec64({1, 2, 3}).requires_grad_();
  for (int i = 0; i < 3; ++i) sum(mul(w, w)).backward();
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{6, 12, 18}));  // 3 * 2w
  w.set_grad(Tensor());
  sum(w).backward();
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{1, 1, 1}));
}

TEST(Autograd, DiamondSumsBothPaths) {
  Tensor x = vec64({2}).requires_grad_();
  Tensor a = mul(x, 3.0), b = mul(x, x);
  Tensor y = add(a, b);  // dy/dx = 3 + 2x = 7
  y.backward(ones({1}, {.dtype = DType::fp64}));
  EXPECT_DOUBLE_EQ(x.grad().item(), 7.0);
}

TEST(Autograd, SecondBackwardThrowsUnlessRetained) {
  Tensor x = vec64({1, 2}).requires_grad_();
  Tensor y = sum(exp(x));
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  EXPECT_NEAR(x.grad().at({0}), 2 * std::exp(1.0), 1e-12);
  EXPECT_THROW(y.backward(), std::runtime_error);
}

TEST(Autograd, NoGradRecordsNothing) {
  Tensor x = vec64({1, 2}).requires_grad_();
  Tensor y;
  {
    NoGradGuard ng;
    y = mul(exp(x), 2.0);
    EXPECT_FALSE(GradMode::is_enabled());
  }
  EXPECT_TRUE(GradMode::is_enabled());
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.grad_fn(), nullptr);
  EXPECT_THROW(sum(y).backward(), std::runtime_error);
  Tensor z = mul(x, 2.0);
  EXPECT_TRUE(z.requires_grad());
  EXPECT_NE(z.grad_fn(), nullptr);
  EXPECT_EQ(z.grad_fn()->name(), "mul_scalar_backward");
}

TEST(Autograd, DetachStopsGradient) {
  Tensor x = vec64({3}).requires_grad_();
  Tensor y = mul(x, x.detach());  // d/dx = x (detached factor is a constant)
  y.backward(ones({1}, {.dtype = DType::fp64}));
  EXPECT_DOUBLE_EQ(x.grad().item(), 3.0);
  EXPECT_FALSE(x.detach().requires_grad());
  EXPECT_EQ(x.detach().data_ptr(), x.data_ptr());
}

TEST(Autograd, NonScalarBackwardNeedsGrad) {
  Tensor x = vec64({1, 2}).requires_grad_();
  EXPECT_THROW(mul(x, 2.0).backward(), std::invalid_argument);
}

TEST(Autograd, InPlaceOnLeafNeedsNoGrad) {
  Tensor w = vec64({1, 2}).requires_grad_();
  EXPECT_THROW(w.add_(vec64({1, 1})), std::logic_error);
  {
    NoGradGuard ng;
    w.add_(vec64({1, 1}), -0.5);
  }
  EXPECT_EQ(w.to_vector<double>(), (std::vector<double>{0.5, 1.5}));
}

TEST(Autograd, LowPrecisionLeafAccumulatesInFp32) {
  Tensor w = from_vector(std::vector<double>{1, 2}, {2}, {.dtype = DType::bf16}).requires_grad_();
  Tensor y = sum(mul(w, 3.0));
  y.backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), DType::fp32);
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{3, 3}));
  // Through a cast: an fp32 master weight cast to bf16 gets an fp32 gradient.
  Tensor m = from_vector(std::vector<double>{0.5, 0.25}, {2}).requires_grad_();
  sum(mul(m.to(DType::bf16, Round::nearest_even), 2.0)).backward();
  EXPECT_EQ(m.grad().dtype(), DType::fp32);
  EXPECT_EQ(m.grad().to_vector<double>(), (std::vector<double>{2, 2}));
}

TEST(Autograd, GradcheckCatchesWrongBackward) {
  // An op whose recorded backward is off by a factor of 2.
  auto wrong = [](const std::vector<Tensor>& v) {
    Tensor out;
    {
      NoGradGuard ng;
      out = mul(v[0], v[0]);
    }
    const Tensor x = v[0];
    detail::record(OpId::mul, DType::fp64, {&x}, {&out}, [x](BackwardContext& ctx) {
      ctx.grad_inputs[0] = mul(ctx.grad(), mul(x.detach(), 4.0));  // should be 2x
    });
    return out;
  };
  Tensor x = vec64({0.5, -1.0, 2.0}).requires_grad_();
  EXPECT_FALSE(gradcheck(wrong, {x}).ok);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& v) { return mul(v[0], v[0]); }, {x}).ok);
}

// A 4-layer MLP segment with GELU: enough activations that checkpointing shows.
struct Mlp {
  std::vector<Tensor> w, b;
  explicit Mlp(int width, int layers, uint64_t seed) {
    Generator g(seed);
    for (int i = 0; i < layers; ++i) {
      w.push_back(normal({width, width}, 0.0, 0.05, g).requires_grad_());
      b.push_back(zeros({width}).requires_grad_());
    }
  }
  Tensor block(const Tensor& x) const {
    Tensor h = x;
    for (size_t i = 0; i < w.size(); ++i) h = gelu(linear(h, w[i], b[i]));
    return h;
  }
  void zero_grad() {
    for (auto& t : w) t.set_grad(Tensor());
    for (auto& t : b) t.set_grad(Tensor());
  }
};

TEST(Checkpoint, SameGradientsLowerPeakMemory) {
  const int width = 256, batch = 256;
  Mlp mlp(width, 6, 7);
  Generator g(8);
  const Tensor x0 = randn({batch, width}, g);
  auto run = [&](bool ckpt, int64_t& peak_delta) {
    mlp.zero_grad();
    Tensor x = x0.detach().requires_grad_();
    const int64_t base = allocator_stats().allocated_bytes;
    reset_peak_memory();
    Tensor h = ckpt ? checkpoint([&](const Tensor& t) { return mlp.block(t); }, x) : mlp.block(x);
    Tensor loss = mean(mul(h, h));
    peak_delta = allocator_stats().peak_allocated_bytes - base;
    loss.backward();
    std::vector<std::vector<double>> grads;
    for (auto& t : mlp.w) grads.push_back(t.grad().to_double_vector());
    grads.push_back(x.grad().to_double_vector());
    return grads;
  };
  int64_t peak_plain = 0, peak_ckpt = 0;
  const auto g_plain = run(false, peak_plain);
  const auto g_ckpt = run(true, peak_ckpt);
  ASSERT_EQ(g_plain.size(), g_ckpt.size());
  for (size_t i = 0; i < g_plain.size(); ++i) {
    for (size_t j = 0; j < g_plain[i].size(); ++j)
      ASSERT_NEAR(g_plain[i][j], g_ckpt[i][j], 1e-6) << i;
  }
  // Plain forward keeps 2 activations per layer (linear output for gelu, gelu output for the
  // next linear): about 12 x 256 KiB; checkpointed keeps only the segment output.
  const int64_t act = int64_t{batch} * width * 4;
  EXPECT_GT(peak_plain, 10 * act);
  EXPECT_LT(peak_ckpt, 4 * act);
  RecordProperty("peak_plain_bytes", std::to_string(peak_plain));
  RecordProperty("peak_checkpoint_bytes", std::to_string(peak_ckpt));
}

TEST(Checkpoint, DropoutMasksReplay) {
  Generator gw(1);
  Tensor w = randn({8, 8}, gw).requires_grad_();
  const Tensor x0 = randn({4, 8}, gw);
  auto seg = [&](Generator& g) {
    return [&w, &g](const Tensor& t) { return dropout(linear(t, w), 0.5, true, g); };
  };
  Generator g1(42), g2(42);
  Tensor x1 = x0.detach().requires_grad_();
  sum(seg(g1)(x1)).backward();
  const auto gw_plain = w.grad().to_double_vector();
  const auto gx_plain = x1.grad().to_double_vector();
  w.set_grad(Tensor());
  Tensor x2 = x0.detach().requires_grad_();
  sum(checkpoint(seg(g2), x2)).backward();
  EXPECT_EQ(w.grad().to_double_vector(), gw_plain);
  EXPECT_EQ(x2.grad().to_double_vector(), gx_plain);
  EXPECT_EQ(g1.counter(), g2.counter());  // the recomputation did not draw new seeds
}

namespace {
int g_hook_calls = 0;
OpId g_last_op = OpId::to;
void counting_hook(OpId op, std::span<Tensor>) {
  ++g_hook_calls;
  g_last_op = op;
}
}  // namespace

TEST(Autograd, CastPolicyHookRunsInForwardOnly) {
  Tensor w = vec64({1, 2}).requires_grad_();
  set_cast_policy_hook(&counting_hook);
  g_hook_calls = 0;
  Tensor y = sum(mul(w, w));
  EXPECT_EQ(g_hook_calls, 2);  // mul, sum
  EXPECT_EQ(g_last_op, OpId::sum);
  y.backward();  // backward functions call ops too, with the hook suspended
  EXPECT_EQ(g_hook_calls, 2);
  Tensor z = checkpoint([](const Tensor& t) { return exp(t); }, w);
  EXPECT_EQ(g_hook_calls, 3);
  sum(z).backward();  // sum's hook call, then exp again in the recomputation
  EXPECT_EQ(g_hook_calls, 5);
  set_cast_policy_hook(nullptr);
}

// The tied embedding (nn/gpt.h): one fp32 weight read by the embedding and by the head's GEMM.
// The embedding's backward adds its rows into the gradient the head already produced
// (GradAdder, in place) instead of allocating a dense [V, E] gradient and adding it: bit for
// bit the old sum head + dense (each row's contributions summed from +0 in index order first),
// through accumulation over backward calls, retain_graph and checkpointing.
namespace tied {
constexpr int64_t kV = 40, kE = 24;
std::vector<uint32_t> bits(const Tensor& t) {
  const Tensor c = t.contiguous();
  std::vector<uint32_t> b(size_t(c.numel()));
  std::memcpy(b.data(), c.data<float>(), b.size() * 4);
  return b;
}
struct Inputs {
  Tensor idx, r, w0;
};
Inputs inputs(uint64_t seed) {
  Generator g(seed);
  std::vector<int64_t> rows;
  for (int i = 0; i < 48; ++i) rows.push_back((i * 5 + i / 4) % 31);  // repeats; rows 31+ unused
  return {from_vector(rows, {6, 8}), randn({6, 8, kV}, g), randn({kV, kE}, g)};
}
// loss(w_emb, w_head) = sum(linear(tanh(embedding(idx, w_emb)), w_head) * r) (the head as nn/gpt.h
// computes it); the tied model passes
// one weight as both.
Tensor loss_of(const Inputs& in, const Tensor& w_emb, const Tensor& w_head, bool ckpt = false) {
  Tensor x = embedding(in.idx, w_emb);
  auto body = [](const Tensor& t) { return tanh(t); };
  Tensor h = ckpt ? checkpoint(body, x) : body(x);
  return sum(mul(linear(h, w_head), in.r));
}
// The old result: the head's gradient and the dense embedding gradient on separate leaves,
// added as the engine added them (head first, then the dense one).
Tensor reference_grad(const Inputs& in, int backwards) {
  Tensor acc;
  for (int k = 0; k < backwards; ++k) {
    // The head's part (the embedding's input detached) and the embedding's (the head's weight
    // detached: its gradient is the dense one, made when no other gradient is accumulating).
    Tensor wh = in.w0.detach().requires_grad_(), we = in.w0.detach().requires_grad_();
    loss_of(in, wh.detach(), wh).backward();
    loss_of(in, we, we.detach()).backward();
    Tensor step = wh.grad().clone();
    step.add_(we.grad());
    if (acc.defined()) acc.add_(step); else acc = step;
  }
  return acc;
}
}  // namespace tied

TEST(Autograd, TiedEmbeddingGradientIsTheDenseSumBitForBit) {
  const tied::Inputs in = tied::inputs(21);
  for (BackendKind k : {BackendKind::cpu, BackendKind::ref}) {
    BackendGuard bg(k);  // the reference on the same backend (ref's GEMMs sum in double)
    const Tensor want1 = tied::reference_grad(in, 1), want2 = tied::reference_grad(in, 2);
    {
      Tensor w = in.w0.detach().requires_grad_();
      tied::loss_of(in, w, w).backward();
      EXPECT_EQ(tied::bits(w.grad()), tied::bits(want1)) << "one backward";
      tied::loss_of(in, w, w).backward();  // accumulation (micro-batches)
      EXPECT_EQ(tied::bits(w.grad()), tied::bits(want2)) << "two backwards";
    }
    {
      Tensor w = in.w0.detach().requires_grad_();
      Tensor l = tied::loss_of(in, w, w);
      l.backward(Tensor(), /*retain_graph=*/true);
      l.backward();
      EXPECT_EQ(tied::bits(w.grad()), tied::bits(want2)) << "retain_graph";
    }
    {
      Tensor w = in.w0.detach().requires_grad_();
      tied::loss_of(in, w, w, /*ckpt=*/true).backward();
      EXPECT_EQ(tied::bits(w.grad()), tied::bits(want1)) << "checkpointing";
    }
  }
}

TEST(Autograd, UntiedEmbeddingGradientIsUnchanged) {
  const tied::Inputs in = tied::inputs(22);
  Tensor we = in.w0.detach().requires_grad_();
  Tensor wh = in.w0.detach().requires_grad_();
  tied::loss_of(in, we, wh).backward();
  const Tensor first = we.grad().clone();
  tied::loss_of(in, we, wh).backward();
  Tensor twice = first.clone();
  twice.add_(first);
  EXPECT_EQ(tied::bits(we.grad()), tied::bits(twice));
  // Rows no index references get no gradient.
  for (int64_t v = 31; v < tied::kV; ++v)
    for (int64_t e = 0; e < tied::kE; ++e) ASSERT_EQ(first.at({v, e}), 0.0);
}

TEST(Autograd, TiedEmbeddingGradientAgainstFiniteDifferences) {
  const tied::Inputs in = tied::inputs(23);
  Tensor w = in.w0.detach().requires_grad_();
  tied::loss_of(in, w, w).backward();
  const Tensor grad = w.grad();
  // Central differences in fp64 on the same function (fp64 takes the dense path).
  const Tensor w64 = in.w0.to(DType::fp64);
  const tied::Inputs in64{in.idx, in.r.to(DType::fp64), w64};
  const double eps = 1e-6;
  for (int64_t v : {0, 3, 17, 30, 35}) {    // referenced rows and an unused one
    for (int64_t e : {0, 11, 23}) {
      Tensor wp = w64.clone(), wm = w64.clone();
      wp.data<double>()[v * tied::kE + e] += eps;
      wm.data<double>()[v * tied::kE + e] -= eps;
      NoGradGuard ng;
      const double fd =
          (tied::loss_of(in64, wp, wp).item() - tied::loss_of(in64, wm, wm).item()) / (2 * eps);
      EXPECT_NEAR(grad.at({v, e}), fd, 1e-3 * (1 + std::abs(fd))) << v << "," << e;
    }
  }
}

TEST(Autograd, TiedEmbeddingAddsInPlaceWithoutADenseGradient) {
  // A wide vocabulary: the dense [V, E] gradient would be the largest tensor of backward.
  const int64_t V = 4096, E = 64;
  Generator g(24);
  const Tensor idx = from_vector(std::vector<int64_t>{5, 9, 5, 100}, {4});
  const Tensor r = randn({4, V}, g);
  Tensor w = randn({V, E}, g).requires_grad_();
  Tensor l = sum(mul(linear(embedding(idx, w), w), r));
  const int64_t base = allocator_stats().allocated_bytes;
  reset_peak_memory();
  l.backward();
  const int64_t peak = allocator_stats().peak_allocated_bytes - base;
  const int64_t dense = V * E * 4;
  // The head's weight gradient (one [V, E]) is the gradient itself; nothing else that large.
  EXPECT_LT(peak, dense + dense / 2) << "peak " << peak << " bytes";
}

}  // namespace
}  // namespace mixp
