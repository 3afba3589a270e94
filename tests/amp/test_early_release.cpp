// Activations freed as soon as nothing needs them: a linear's saved input is dropped before its
// dX is allocated when the graph is not retained (BackwardContext::last_use), and a transformer
// block given its input by value (`x = block(std::move(x))`) frees it after the first residual
// add. Both lower the step's peak without changing a single value.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "mixp/mixp.h"

namespace mixp {
namespace {

Tensor rnd(const Shape& s, uint64_t seed) {
  Generator gen(seed);
  return randn(s, gen);
}

struct BackwardRun {
  int64_t peak_above_start = 0;
  std::vector<double> dw;
};

// y = linear(x, w) with the leaf x held by nothing but the linear's node once the caller lets
// go of it, so the linear's backward is where the peak is: dW, then dX (x's size) while x is
// either still saved (retain_graph, or no early release) or already freed.
BackwardRun linear_backward(bool retain) {
  Tensor w = rnd({256, 1024}, 2).requires_grad_();
  Tensor y;
  {
    Tensor x = rnd({512, 1024}, 1).requires_grad_();
    y = linear(x, w);
  }
  const Tensor dy = rnd({512, 256}, 3);
  reset_peak_memory();
  const int64_t start = allocator_stats().requested_bytes;
  y.backward(dy, retain);
  return {allocator_stats().peak_requested_bytes - start, w.grad().to_double_vector()};
}

TEST(EarlyRelease, LinearDropsItsSavedInputBeforeAllocatingDx) {
  const BackwardRun kept = linear_backward(/*retain=*/true), freed = linear_backward(false);
  EXPECT_EQ(freed.dw, kept.dw);
  const int64_t x_bytes = 512 * 1024 * 4;
  EXPECT_LE(freed.peak_above_start, kept.peak_above_start - x_bytes / 2)
      << freed.peak_above_start << " vs " << kept.peak_above_start;
}

TEST(EarlyRelease, RetainedGraphStillRunsTwice) {
  Tensor z = rnd({8, 16}, 4).requires_grad_(), w = rnd({4, 16}, 5).requires_grad_();
  Tensor y = linear(mul(z, 2.0), w);
  const Tensor dy = rnd({8, 4}, 6);
  y.backward(dy, /*retain_graph=*/true);
  const std::vector<double> first = w.grad().to_double_vector();
  y.backward(dy);
  const std::vector<double> twice = w.grad().to_double_vector();
  for (size_t i = 0; i < first.size(); ++i) EXPECT_DOUBLE_EQ(twice[i], 2 * first[i]);
}

TEST(EarlyRelease, TransformerBlockFreesAnInputItOwns) {
  // Under Autocast with 16-bit LayerNorm saves nothing keeps the block's fp32 input alive once
  // the first residual add has read it, if the caller gives it up.
  Generator gen(7);
  nn::TransformerBlock blk(256, 4, 1024, gen);
  const amp::AutocastOptions opt{.dtype = DType::bf16, .enabled = true, .cache_enabled = true,
                                 .low_precision_norm_saves = true};
  auto run = [&](bool give_up) {
    Tensor x = rnd({8, 64, 256}, 8);
    reset_peak_memory();
    const int64_t start = allocator_stats().requested_bytes;
    Tensor y;
    {
      amp::Autocast ac(opt);
      y = give_up ? blk(std::move(x)) : blk(x);
    }
    return std::pair{allocator_stats().peak_requested_bytes - start, y.to_double_vector()};
  };
  (void)run(false);  // first use: the weights' bf16 copies (weight shadows) are made here
  const auto [held_peak, held_y] = run(false);
  const auto [owned_peak, owned_y] = run(true);
  EXPECT_EQ(owned_y, held_y);
  const int64_t x_bytes = 8 * 64 * 256 * 4;
  EXPECT_LE(owned_peak, held_peak - x_bytes * 9 / 10) << owned_peak << " vs " << held_peak;
}

}  // namespace
}  // namespace mixp
