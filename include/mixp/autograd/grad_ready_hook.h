// A hook that backward calls right after it has accumulated a leaf's gradient (PyTorch:
// Tensor.register_post_accumulate_grad_hook; here one hook per thread, for every leaf). When it
// runs, the leaf's .grad holds this backward's whole contribution: the engine runs a leaf's
// accumulator once, after every gradient flowing into it has been summed (src/autograd/engine.cpp).
// A leaf reached again by another backward -- a checkpointed segment's recomputation runs its own
// (autograd/checkpoint.h), or a later micro-batch -- is reported again.
// Data parallelism starts a gradient bucket's reduction from it, so that communication overlaps
// the rest of backward (train/data_parallel.h).
#pragma once
#include <functional>

#include "mixp/tensor/tensor.h"

namespace mixp {

using GradReadyHook = std::function<void(const Tensor& leaf)>;

// Installs `hook` on this thread for the scope's lifetime (the previous one is restored after).
class GradReadyHookScope {
 public:
  explicit GradReadyHookScope(GradReadyHook hook);
  ~GradReadyHookScope();
  GradReadyHookScope(const GradReadyHookScope&) = delete;
  GradReadyHookScope& operator=(const GradReadyHookScope&) = delete;

 private:
  GradReadyHook previous_;
};

namespace detail {
// The hook installed on this thread, or null.
const GradReadyHook* grad_ready_hook();
}  // namespace detail

}  // namespace mixp
