// Parameter-free activation modules, so that Sequential models read like PyTorch's.
#pragma once
#include "mixp/nn/module.h"
#include "mixp/ops/ops.h"

namespace mixp::nn {

class ReLU : public Module {
 public:
  ReLU() : Module("relu") {}
  Tensor forward(const Tensor& x) override;
};

// GELU as torch.nn.GELU(approximate=...): exact (erf) by default, as PyTorch's;
// GeluApprox::tanh for the tanh approximation (GPT-2; what mixp's built-in GPT uses). See ops.h.
class GELU : public Module {
 public:
  explicit GELU(GeluApprox approximate = GeluApprox::none)
      : Module("gelu"), approximate_(approximate) {}
  Tensor forward(const Tensor& x) override;
  GeluApprox approximate() const { return approximate_; }

 protected:
  std::string describe() const override;

 private:
  GeluApprox approximate_;
};

}  // namespace mixp::nn
