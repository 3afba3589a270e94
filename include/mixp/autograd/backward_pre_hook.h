// A hook that backward calls just before a tensor's gradient flows on into what computed it
// (PyTorch: Module.register_full_backward_pre_hook, or a Tensor.register_hook on a module's
// output, which is how FSDP gathers a module's parameters again before its backward).
//
// with_backward_pre_hook(y, hook) returns an alias of y (the same storage, shape and values)
// whose use in later ops records them as usual; when backward reaches the alias, it runs `hook`
// once and passes the gradient on to y unchanged. Every node that computed y runs after the hook
// (it needs y's gradient), so a hook on a module's output runs before any of that module's
// backward. The gradient's values are untouched, so the results are the same, bit for bit, as
// without the hook. Outside grad mode, or for a y that does not require grad, y is returned.
// Data parallelism's ZeRO stage 3 gathers a module's parameters here (train/trainer_zero3.h).
#pragma once
#include <functional>

#include "mixp/tensor/tensor.h"

namespace mixp {

Tensor with_backward_pre_hook(const Tensor& y, std::function<void()> hook);

}  // namespace mixp
