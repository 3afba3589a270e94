// Allocation tracking: current/peak counters, caching, and a steady-state training loop that
// makes no system allocations after its first iteration.
#include <gtest/gtest.h>

#include "mixp/mixp.h"

namespace mixp {
namespace {

TEST(Allocator, CountsCurrentAndPeak) {
  const AllocatorStats s0 = allocator_stats();
  reset_peak_memory();
  {
    Tensor a = empty({1024});  // 4 KiB
    Tensor b = empty({2048});  // 8 KiB
    const AllocatorStats s1 = allocator_stats();
    EXPECT_EQ(s1.allocated_bytes - s0.allocated_bytes, 4096 + 8192);
    EXPECT_EQ(s1.requested_bytes - s0.requested_bytes, 4096 + 8192);
  }
  const AllocatorStats s2 = allocator_stats();
  EXPECT_EQ(s2.allocated_bytes, s0.allocated_bytes);
  EXPECT_GE(s2.peak_allocated_bytes - s0.allocated_bytes, 4096 + 8192);
  reset_peak_memory();
  EXPECT_EQ(allocator_stats().peak_allocated_bytes, s2.allocated_bytes);
}

TEST(Allocator, ReusesCachedBlocks) {
  if (!CachingAllocator::cpu().caching()) GTEST_SKIP() << "MIXP_ALLOCATOR=system";
  { Tensor warm = empty({1000, 100}); }
  const AllocatorStats s0 = allocator_stats();
  for (int i = 0; i < 10; ++i) Tensor t = empty({1000, 100});
  const AllocatorStats s1 = allocator_stats();
  EXPECT_EQ(s1.system_allocs, s0.system_allocs);
  EXPECT_EQ(s1.cache_hits - s0.cache_hits, 10);
  // A smaller request may take a cached block up to 1.5x its size.
  for (int i = 0; i < 3; ++i) Tensor t = empty({1000, 70});
  EXPECT_EQ(allocator_stats().system_allocs, s0.system_allocs);
}

TEST(Allocator, AlignmentAndRounding) {
  Tensor t = empty({3});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % kTensorAlignment, 0u);
  EXPECT_EQ(CachingAllocator::round_size(1), 64u);
  EXPECT_EQ(CachingAllocator::round_size(5000), 5120u);
  EXPECT_EQ(CachingAllocator::round_size(2u << 20), 2u << 20);
}

// One training step of a small MLP + a small CNN piece + attention: the ops of the three target
// models. Same shapes every iteration.
struct Step {
  Generator g{1};
  Tensor w1 = normal({64, 32}, 0, 0.1, g).requires_grad_(), b1 = zeros({64}).requires_grad_();
  Tensor w2 = normal({10, 64}, 0, 0.1, g).requires_grad_(), b2 = zeros({10}).requires_grad_();
  Tensor cw = normal({4, 1, 3, 3}, 0, 0.1, g).requires_grad_(), gamma = ones({4}).requires_grad_();
  Tensor beta = zeros({4}).requires_grad_(), rm = zeros({4}), rv = ones({4});
  Tensor x = randn({16, 32}, g), img = randn({16, 1, 8, 8}, g), q = randn({2, 2, 8, 4}, g);
  Tensor y = randint(0, 10, {16}, g);
  std::vector<Tensor*> params{&w1, &b1, &w2, &b2, &cw, &gamma, &beta};

  void run() {
    Tensor h = linear(x, w1, b1, Activation::relu);
    Tensor logits = linear(dropout(h, 0.1, true, g), w2, b2);
    Tensor c =
        max_pool2d(relu(batch_norm(conv2d(img, cw, Tensor(), 1, 1), rm, rv, gamma, beta, true)), 2);
    Tensor qq = mul(q, mean(c));
    Tensor a = scaled_dot_product_attention(qq, qq, qq, true);
    Tensor loss =
        add(add(cross_entropy(logits, y), mean(a)), mse_loss(layer_norm(h, {64}), zeros({16, 64})));
    loss.backward();
    NoGradGuard ng;
    for (Tensor* p : params) {
      p->add_(p->grad(), -0.01);
      p->grad().zero_();  // keep the gradient buffers (set_to_none=false)
    }
  }
};

TEST(Allocator, SteadyStateLoopMakesNoSystemAllocations) {
  if (!CachingAllocator::cpu().caching()) GTEST_SKIP() << "MIXP_ALLOCATOR=system";
  Step step;
  step.run();
  step.run();  // the first iterations fill the cache
  const AllocatorStats s0 = allocator_stats();
  for (int i = 0; i < 5; ++i) step.run();
  const AllocatorStats s1 = allocator_stats();
  EXPECT_EQ(s1.system_allocs, s0.system_allocs);
  EXPECT_GT(s1.allocs, s0.allocs);
  EXPECT_EQ(s1.allocated_bytes, s0.allocated_bytes);  // nothing leaks across iterations
}

}  // namespace
}  // namespace mixp
