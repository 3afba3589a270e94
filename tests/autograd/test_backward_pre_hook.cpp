// with_backward_pre_hook (autograd/backward_pre_hook.h): the hook runs once, before any node that
// computed the hooked tensor, and the gradients are the same as without it.
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <vector>

#include "mixp/autograd/backward_pre_hook.h"
#include "mixp/autograd/grad_mode.h"
#include "mixp/ops/deferred_weight_grad.h"
#include "mixp/mixp.h"

namespace mixp {
namespace {

Tensor vec(std::vector<float> v) {
  const int64_t n = int64_t(v.size());
  return from_vector(v, {n});
}

TEST(BackwardPreHook, RunsOnceBeforeTheProducersBackwardWithTheSameGradients) {
  Tensor w = vec({0.5f, -1.25f, 3.0f}).requires_grad_();
  Tensor x = vec({2.0f, 0.75f, -1.5f});
  // Reference: no hook.
  sum(mul(mul(w, x), w)).backward();
  const std::vector<float> ref = w.grad().to_vector<float>();
  w.set_grad(Tensor());

  int calls = 0;
  std::vector<float> w_at_hook;
  Tensor h = mul(w, x);  // the "module": its backward needs w
  h = with_backward_pre_hook(h, [&] {
    ++calls;
    // No gradient has reached w yet: the hook runs before h's producer (and everything before).
    EXPECT_FALSE(w.grad().defined());
    w_at_hook = w.to_vector<float>();
  });
  sum(mul(h, w)).backward();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(w_at_hook.size(), 3u);
  EXPECT_EQ(w.grad().to_vector<float>(), ref);  // bit for bit
}

TEST(BackwardPreHook, IsNotRecordedWithoutGradMode) {
  Tensor w = vec({1.0f, 2.0f}).requires_grad_();
  NoGradGuard no_grad;
  const Tensor y = mul(w, 2.0);
  const Tensor z = with_backward_pre_hook(y, [] {});
  EXPECT_TRUE(z.is_same(y));
}

// A tied head in miniature (ops/deferred_weight_grad.h, with_grad_for): the head's linear
// defers its weight gradient, which the token embedding's alias delivers when backward reaches
// it. The tied weight's gradient is the same, bit for bit, as the head's own backward gives
// (repeated tokens included: the embedding adds its rows after the head's gradient, as then),
// and it is computed only once backward has passed the head.
TEST(GradFor, DeliversADeferredTiedHeadGradientBitIdentically) {
  const int64_t V = 7, C = 5;
  std::vector<float> wv(size_t(V * C));
  for (size_t i = 0; i < wv.size(); ++i) wv[i] = 0.1f * float(int(i * 37 % 23) - 11) + 1e-3f;
  const Tensor idx = from_vector(std::vector<int64_t>{3, 1, 3, 6, 0, 3}, {6});
  auto run = [&](bool defer) {
    Tensor w = from_vector(wv, {V, C}).requires_grad_();
    auto d = std::make_shared<DeferredWeightGrad>();
    bool pending_at_embedding = false;
    Tensor e = embedding(idx, w);
    if (defer) {
      e = with_grad_for(e, w, [&, d] {
        pending_at_embedding = d->pending();
        EXPECT_FALSE(w.grad().defined());
        return d->compute();
      });
    }
    Tensor h = tanh(mul(e, e));
    Tensor y;
    {
      std::optional<DeferWeightGradScope> scope;
      if (defer) scope.emplace(w, d);
      y = linear(h, w);
    }
    sum(mul(y, y)).backward();
    if (defer) {
      EXPECT_TRUE(pending_at_embedding);
    }
    return w.grad().to_vector<float>();
  };
  const std::vector<float> ref = run(false);
  EXPECT_EQ(run(true), ref);  // bit for bit
}

TEST(GradFor, NothingDeferredGivesNothing) {
  Tensor w = vec({0.5f, -1.25f, 3.0f}).requires_grad_();
  Tensor x = vec({2.0f, 0.75f, -1.5f});
  sum(mul(w, x)).backward();
  const std::vector<float> ref = w.grad().to_vector<float>();
  w.set_grad(Tensor());
  Tensor y = with_grad_for(mul(w, x), w, [] { return Tensor(); });
  sum(y).backward();
  EXPECT_EQ(w.grad().to_vector<float>(), ref);
}

}  // namespace
}  // namespace mixp
