#include "mixp/nn/rms_norm.h"

#include <fmt/format.h>

#include <stdexcept>

#include "mixp/ops/ops.h"
#include "mixp/tensor/factories.h"

namespace mixp::nn {

RMSNorm::RMSNorm(int64_t dim, double eps) : Module("rms_norm"), dim_(dim), eps_(eps) {
  if (dim_ <= 0)
    throw std::invalid_argument(
        fmt::format("mixp::nn::RMSNorm: dim must be positive, got {}", dim_));
  weight_ = &register_parameter("weight", ones({dim_}));
}

Tensor RMSNorm::forward(const Tensor& x) {
  if (!x.defined() || x.dim() < 1 || x.size(-1) != dim_) {
    throw std::invalid_argument(
        fmt::format("mixp::nn::RMSNorm({}): input must be [..., {}], got {}", dim_, dim_,
                    x.defined() ? x.shape().str() : "(undefined)"));
  }
  return rms_norm(x, *weight_, eps_);
}

std::string RMSNorm::describe() const {
  return fmt::format("dim={}, eps={}", dim_, eps_);
}

}  // namespace mixp::nn
