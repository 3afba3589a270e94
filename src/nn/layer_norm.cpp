#include "mixp/nn/layer_norm.h"

#include <fmt/format.h>

#include <stdexcept>

#include "mixp/ops/ops.h"
#include "mixp/tensor/factories.h"

namespace mixp::nn {

LayerNorm::LayerNorm(int64_t dim, double eps, bool affine)
    : Module("layer_norm"), dim_(dim), eps_(eps) {
  if (dim_ <= 0)
    throw std::invalid_argument(
        fmt::format("mixp::nn::LayerNorm: dim must be positive, got {}", dim_));
  if (affine) {
    weight_ = &register_parameter("weight", ones({dim_}));
    bias_ = &register_parameter("bias", zeros({dim_}));
  } else {
    weight_ = bias_ = &none_;
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  if (x.dim() < 1 || x.size(-1) != dim_) {
    throw std::invalid_argument(
        fmt::format("mixp::nn::LayerNorm({}): input must be [..., {}], got {}", dim_, dim_,
                    x.defined() ? x.shape().str() : "(undefined)"));
  }
  return layer_norm(x, {dim_}, *weight_, *bias_, eps_);
}

std::string LayerNorm::describe() const {
  return fmt::format("dim={}, eps={}", dim_, eps_);
}

}  // namespace mixp::nn
