// Parameter-free activation modules, so that Sequential models read like PyTorch's.
#pragma once
#include "mixp/nn/module.h"

namespace mixp::nn {

class ReLU : public Module {
 public:
  ReLU() : Module("relu") {}
  Tensor forward(const Tensor& x) override;
};

// GELU, tanh approximation (torch.nn.GELU(approximate="tanh"), GPT-2; see ops.h gelu).
class GELU : public Module {
 public:
  GELU() : Module("gelu") {}
  Tensor forward(const Tensor& x) override;
};

}  // namespace mixp::nn
