#include "mixp/nn/activation.h"

#include "mixp/ops/ops.h"

namespace mixp::nn {

Tensor ReLU::forward(const Tensor& x) {
  return relu(x);
}
Tensor GELU::forward(const Tensor& x) {
  return gelu(x, approximate_);
}
std::string GELU::describe() const {
  return approximate_ == GeluApprox::tanh ? "approximate='tanh'" : "approximate='none'";
}

}  // namespace mixp::nn
