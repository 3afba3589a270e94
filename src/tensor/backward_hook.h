// Tensor::backward() runs the autograd engine through this hook, which the engine registers while
// libmixp loads (src/autograd/engine.cpp): the tensor module holds the graph's fields (grad_fn,
// grad) but includes nothing of the engine above it (docs/architecture.md 2.2).
#pragma once
#include <span>

#include "mixp/tensor/tensor.h"

namespace mixp::detail {

using BackwardRunner = void (*)(std::span<const Tensor> roots, std::span<const Tensor> grads,
                                bool retain_graph);
// Registers the engine (process-wide; once, at load).
void set_backward_runner(BackwardRunner run);

}  // namespace mixp::detail
