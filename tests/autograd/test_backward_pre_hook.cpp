// with_backward_pre_hook (autograd/backward_pre_hook.h): the hook runs once, before any node that
// computed the hooked tensor, and the gradients are the same as without it.
#include <gtest/gtest.h>

#include <vector>

#include "mixp/autograd/backward_pre_hook.h"
#include "mixp/autograd/grad_mode.h"
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

}  // namespace
}  // namespace mixp
