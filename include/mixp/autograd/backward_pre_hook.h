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

// An alias of y whose backward passes y's gradient on unchanged and gives `w` (a tensor that
// requires grad) the tensor `make` returns at that moment (nothing when it returns an undefined
// tensor; otherwise w's shape, in its gradient's dtype). It reaches w before any node that
// computed y runs, so before whatever those add to w's gradient. ZeRO stage 3 delivers GPT-2's
// tied head weight gradient this way, computed when backward reaches the token embedding
// (ops/deferred_weight_grad.h, train/trainer_zero3.h). Outside grad mode, or for a y that does
// not require grad, y is returned.
Tensor with_grad_for(const Tensor& y, const Tensor& w, std::function<Tensor()> make);

}  // namespace mixp
