// Weight shadows (autocast.h, amp's cache weight_shadow.h): the optimizer rewrites the low-precision copy
// of each fp32 weight in its update pass and the next autocast region uses it instead of casting.
// Checked here: shadows are used from the second step on, hold exactly what a fresh cast gives, are
// never used once the weight was written some other way, are not overwritten while someone else
// holds them, and training gives bit-identical weights and losses with shadows on and off.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <vector>

#include "mixp/mixp.h"

namespace mixp::amp {
namespace {

Tensor rnd(const Shape& s, uint64_t seed, double scale = 1.0) {
  Generator gen(seed);
  return mul(randn(s, gen), scale);
}

std::vector<double> values(const Tensor& t) {
  return t.to_double_vector();
}

// Restores the process-wide switch however a test ends.
struct ShadowSwitch {
  explicit ShadowSwitch(bool on) : prev(weight_shadows_enabled()) { set_weight_shadows(on); }
  ~ShadowSwitch() { set_weight_shadows(prev); }
  bool prev;
};

// A two-layer MLP on fixed data, with fp32 parameters.
struct TinyMlp {
  Tensor x = rnd({32, 48}, 1);
  Tensor target = rnd({32, 10}, 2);
  Tensor w1 = rnd({64, 48}, 3, 0.15).detach().requires_grad_();
  Tensor b1 = rnd({64}, 4, 0.1).detach().requires_grad_();
  Tensor w2 = rnd({10, 64}, 5, 0.12).detach().requires_grad_();
  std::vector<Tensor> params() const { return {w1, b1, w2}; }
  Tensor loss(DType dt) const {
    Autocast ac(dt);
    return mse_loss(linear(gelu(linear(x, w1, b1)), w2), target);
  }
};

// The copy autocast hands a linear for `w` in a fresh region of dtype `dt`.
Tensor autocast_copy(const Tensor& w, DType dt) {
  Autocast ac(dt);
  Tensor inputs[1] = {w};
  apply_autocast(OpId::linear, inputs, dt, true);
  return inputs[0];
}

// n training steps of m under bf16 autocast.
void take_steps(const TinyMlp& m, optim::Optimizer& opt, int n) {
  for (int step = 0; step < n; ++step) {
    m.loss(DType::bf16).backward();
    opt.step();
    opt.zero_grad();
  }
}

// Whether autocast's bf16 copy of w (from a shadow or not) is bit for bit a fresh cast of w.
bool autocast_copy_is_fresh(const Tensor& w) {
  const Tensor copy = autocast_copy(w, DType::bf16);
  const Tensor fresh = w.to(DType::bf16, kAutocastRound, kAutocastOverflow);
  return copy.dtype() == fresh.dtype() && values(copy) == values(fresh);
}

TEST(WeightShadows, UsedFromTheSecondStepAndEqualToAFreshCast) {
  ShadowSwitch on(true);
  TinyMlp m;
  optim::AdamW opt(m.params(), {.lr = 1e-2});
  reset_autocast_cache_stats();
  take_steps(m, opt, 3);
  const AutocastCacheStats st = autocast_cache_stats();
  EXPECT_EQ(st.misses, 9);       // 3 weights x 3 regions
  EXPECT_EQ(st.shadow_hits, 6);  // all but the first region's
  for (const Tensor& w : m.params()) EXPECT_TRUE(autocast_copy_is_fresh(w));
  EXPECT_EQ(autocast_cache_stats().shadow_hits, 9);
}

// The cache is amp's (Tensor carries no shadow): an entry is the weight's only while the weight
// lives and keeps its storage, and is freed after (a model that is gone: at once, through the
// release hook; QLoRA swapping the frozen weight's storage for its packed codes,
// src/quant/qlora_linear.cpp: at the next purge).
TEST(WeightShadows, FreedWhenTheWeightIsGoneOrItsStorageSwapped) {
  ShadowSwitch on(true);
  weight_shadows().purge();
  const size_t before = weight_shadows().size(), before_bytes = weight_shadows().bytes();
  Tensor kept;
  {
    TinyMlp m;
    optim::AdamW opt(m.params(), {.lr = 1e-2});
    take_steps(m, opt, 1);
    EXPECT_TRUE(weight_shadows().holds(m.w1));
    EXPECT_EQ(weight_shadows().size(), before + 3);
    EXPECT_EQ(weight_shadows().bytes(), before_bytes + 2 * (64 * 48 + 64 + 10 * 64));  // bf16
    kept = m.w2;
  }
  // The dead weights' entries went with them: no purge, no autocast region since.
  EXPECT_EQ(weight_shadows().size(), before + 1);
  EXPECT_EQ(weight_shadows().bytes(), before_bytes + 2 * 10 * 64);
  ASSERT_TRUE(weight_shadows().holds(kept));
  const Tensor copy = kept.detach().clone();
  kept.impl()->storage = copy.impl()->storage;  // the same values in another storage
  EXPECT_FALSE(weight_shadows().lookup(kept, DType::bf16).defined());
  weight_shadows().purge();
  EXPECT_FALSE(weight_shadows().holds(kept));
  EXPECT_EQ(weight_shadows().size(), before);
  EXPECT_NE(optim::weight_shadow_hook(), nullptr);  // amp registered its cache with optim
}

// Issue 30: a weight's shadow dies with the weight (in a Python session, between runs), its
// memory given back to the allocator at once, not at the next purge.
TEST(WeightShadows, DieWithTheirWeightAtOnce) {
  ShadowSwitch on(true);
  Tensor w = rnd({96, 80}, 11).detach().requires_grad_();
  const Tensor other = rnd({8, 80}, 12).detach().requires_grad_();
  (void)autocast_copy(w, DType::bf16);
  (void)autocast_copy(other, DType::bf16);
  ASSERT_TRUE(weight_shadows().holds(w));
  ASSERT_TRUE(weight_shadows().holds(other));
  const size_t bytes = weight_shadows().bytes(), entries = weight_shadows().size();
  const int64_t allocated = allocator_stats(Device::cpu()).allocated_bytes;
  w = Tensor();  // the last reference
  EXPECT_EQ(weight_shadows().bytes(), bytes - 2 * 96 * 80);
  EXPECT_EQ(weight_shadows().size(), entries - 1);
  EXPECT_TRUE(weight_shadows().holds(other));
  // The weight's fp32 bytes and its shadow's bf16 bytes are both back in the allocator.
  EXPECT_GE(allocated - allocator_stats(Device::cpu()).allocated_bytes, 6 * 96 * 80);
}

TEST(WeightShadows, AStaleShadowIsNeverUsed) {
  ShadowSwitch on(true);
  TinyMlp m;
  optim::AdamW opt(m.params(), {.lr = 1e-2});
  take_steps(m, opt, 1);
  // Written outside the optimizer: through copy_, and through a raw pointer + bump_version.
  {
    NoGradGuard ng;
    m.w1.copy_(rnd(m.w1.shape(), 7, 0.1));
    static_cast<float*>(m.w2.data_ptr())[3] = 0.375f;
    m.w2.bump_version();
  }
  reset_autocast_cache_stats();
  EXPECT_TRUE(autocast_copy_is_fresh(m.w1));
  EXPECT_TRUE(autocast_copy_is_fresh(m.w2));
  EXPECT_EQ(autocast_cache_stats().shadow_hits, 0);
  // The recast became the new shadow.
  (void)autocast_copy(m.w1, DType::bf16);
  EXPECT_EQ(autocast_cache_stats().shadow_hits, 1);
  // A shadow of another dtype is not used either.
  (void)autocast_copy(m.w1, DType::fp16);
  EXPECT_EQ(autocast_cache_stats().shadow_hits, 1);
}

TEST(WeightShadows, AShadowSomeoneElseHoldsIsNotOverwritten) {
  ShadowSwitch on(true);
  TinyMlp m;
  optim::AdamW opt(m.params(), {.lr = 1e-2});
  take_steps(m, opt, 1);
  const Tensor held = autocast_copy(m.w1, DType::bf16);  // served by w1's shadow
  const std::vector<double> before = values(held);
  m.loss(DType::bf16).backward();
  opt.step();
  EXPECT_EQ(values(held), before);  // the optimizer dropped the shadow instead of rewriting it
  reset_autocast_cache_stats();
  EXPECT_TRUE(autocast_copy_is_fresh(m.w1));
  EXPECT_EQ(autocast_cache_stats().shadow_hits, 0);
}

TEST(WeightShadows, OffMeansNeitherAttachedNorUsed) {
  ShadowSwitch off(false);
  TinyMlp m;
  optim::AdamW opt(m.params(), {.lr = 1e-2});
  reset_autocast_cache_stats();
  take_steps(m, opt, 2);
  EXPECT_EQ(autocast_cache_stats().shadow_hits, 0);
  EXPECT_FALSE(weight_shadows().holds(m.w1));
}

struct RunResult {
  std::vector<double> losses;
  std::vector<std::vector<double>> weights;
  int64_t shadow_hits = 0;
  int64_t skipped = 0;
};

using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(const std::vector<Tensor>&)>;

RunResult train(bool shadows, DType dt, const MakeOptimizer& make, double init_scale = 0.0) {
  ShadowSwitch sw(shadows);
  TinyMlp m;
  std::unique_ptr<optim::Optimizer> opt = make(m.params());
  GradScaler scaler({.init_scale = init_scale > 0 ? init_scale : 1.0, .enabled = init_scale > 0});
  RunResult r;
  reset_autocast_cache_stats();
  for (int step = 0; step < 8; ++step) {
    Tensor loss = m.loss(dt);
    r.losses.push_back(loss.item());
    scaler.scale(loss).backward();
    scaler.step(*opt);
    scaler.update();
    opt->zero_grad();
  }
  r.shadow_hits = autocast_cache_stats().shadow_hits;
  r.skipped = scaler.skipped_steps();
  for (const Tensor& p : m.params()) r.weights.push_back(values(p));
  return r;
}

void expect_identical(const RunResult& on, const RunResult& off) {
  EXPECT_GT(on.shadow_hits, 0);
  EXPECT_EQ(off.shadow_hits, 0);
  EXPECT_EQ(on.skipped, off.skipped);
  EXPECT_EQ(on.losses, off.losses);
  EXPECT_EQ(on.weights, off.weights);
}

TEST(WeightShadows, TrainingIsBitIdenticalWithAndWithoutShadowsBf16) {
  const MakeOptimizer adamw = [](const std::vector<Tensor>& p) {
    return std::make_unique<optim::AdamW>(p, optim::AdamOptions{.lr = 1e-2});
  };
  expect_identical(train(true, DType::bf16, adamw), train(false, DType::bf16, adamw));
  // The chunked update (bf16 optimizer states) and SGD keep shadows the same way.
  const MakeOptimizer narrow_states = [](const std::vector<Tensor>& p) {
    optim::AdamOptions o{.lr = 1e-2};
    o.precision.state_dtype = DType::bf16;
    return std::make_unique<optim::Adam>(p, o);
  };
  expect_identical(train(true, DType::bf16, narrow_states),
                   train(false, DType::bf16, narrow_states));
  const MakeOptimizer sgd = [](const std::vector<Tensor>& p) {
    return std::make_unique<optim::SGD>(p, optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
  };
  expect_identical(train(true, DType::bf16, sgd), train(false, DType::bf16, sgd));
}

TEST(WeightShadows, TrainingIsBitIdenticalWithAndWithoutShadowsFp16WithSkippedSteps) {
  const MakeOptimizer adamw = [](const std::vector<Tensor>& p) {
    return std::make_unique<optim::AdamW>(p, optim::AdamOptions{.lr = 1e-2});
  };
  // A loss scale large enough that fp16 gradients overflow for the first steps (skipped: the
  // weights and their shadows stay as they are), then small enough for the rest.
  const double scale = 1 << 24;
  const RunResult on = train(true, DType::fp16, adamw, scale);
  const RunResult off = train(false, DType::fp16, adamw, scale);
  EXPECT_GT(on.skipped, 0);
  EXPECT_LT(on.skipped, 7);
  expect_identical(on, off);
}

// Per region (AutocastOptions::weight_shadows = false, what the recipes use under gradient
// checkpointing): no shadow attached or used while the process-wide switch is on, a copy made
// under NoGradGuard is not kept by the region's cache (cast per use), nested guards inherit it,
// and training is bit for bit the same as with shadows.
TEST(WeightShadows, OffForOneRegion) {
  ShadowSwitch on(true);
  TinyMlp m;
  optim::AdamW opt(m.params(), {.lr = 1e-2});
  const AutocastOptions no_shadows{.dtype = DType::bf16, .weight_shadows = false};
  reset_autocast_cache_stats();
  std::vector<double> losses;
  for (int step = 0; step < 3; ++step) {
    Tensor loss;
    {
      Autocast ac(no_shadows);
      {
        Autocast inner(DType::bf16);  // inherits the region's setting
        loss = mse_loss(linear(gelu(linear(m.x, m.w1, m.b1)), m.w2), m.target);
      }
      {
        NoGradGuard ng;  // a checkpointed segment's forward: nothing keeps the copy
        const int64_t before = autocast_cache_stats().entries;
        (void)linear(m.x, m.w1, m.b1);
        EXPECT_EQ(autocast_cache_stats().entries, before);
      }
    }
    losses.push_back(loss.item());
    loss.backward();
    opt.step();
    opt.zero_grad();
  }
  EXPECT_EQ(autocast_cache_stats().shadow_hits, 0);
  for (const Tensor& w : m.params()) EXPECT_FALSE(weight_shadows().holds(w));
  // The same steps with shadows: the same losses and weights.
  TinyMlp ref;
  optim::AdamW ref_opt(ref.params(), {.lr = 1e-2});
  std::vector<double> ref_losses;
  for (int step = 0; step < 3; ++step) {
    Tensor loss = ref.loss(DType::bf16);
    ref_losses.push_back(loss.item());
    loss.backward();
    ref_opt.step();
    ref_opt.zero_grad();
  }
  EXPECT_EQ(losses, ref_losses);
  for (size_t i = 0; i < m.params().size(); ++i)
    EXPECT_EQ(values(m.params()[i]), values(ref.params()[i]));
}

// A per-region copy of a weight wider than the linear's input (the tied [vocab, C] head under
// checkpointing) is freed by the linear's backward before it allocates the weight's fp32
// gradient (dX first, ops/linalg_ops.cpp), and the gradients are those of the shadowed run.
TEST(WeightShadows, PerRegionCopyOfAWideWeightIsFreedBeforeItsGradient) {
  ShadowSwitch on(true);
  auto grads = [](bool shadows, int64_t* peak) {
    const Tensor x = rnd({4, 64}, 7).detach().requires_grad_();
    const Tensor w = rnd({4096, 64}, 8, 0.1).detach().requires_grad_();
    Tensor loss;
    {
      Autocast ac(AutocastOptions{.dtype = DType::bf16, .weight_shadows = shadows});
      loss = sum(linear(x, w));
    }
    reset_peak_memory();
    const int64_t before = allocator_stats().allocated_bytes;
    loss.backward();
    *peak = allocator_stats().peak_allocated_bytes - before;
    return std::pair{values(x.grad()), values(w.grad())};
  };
  int64_t peak_per_region = 0, peak_shadowed = 0;
  const auto a = grads(false, &peak_per_region);
  const auto b = grads(true, &peak_shadowed);
  EXPECT_EQ(a, b);
  // The fp32 dW is 1 MiB and the bf16 copy 512 KiB: they never coexist.
  const int64_t dw = 4096 * 64 * 4;
  EXPECT_LT(peak_per_region, dw + dw / 2) << peak_per_region;
}

}  // namespace
}  // namespace mixp::amp
