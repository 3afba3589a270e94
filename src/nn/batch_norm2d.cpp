#include "mixp/nn/batch_norm2d.h"

#include <fmt/format.h>

#include <stdexcept>

#include "mixp/ops/ops.h"
#include "mixp/tensor/factories.h"

namespace mixp::nn {

BatchNorm2d::BatchNorm2d(int64_t channels, const BatchNormOptions& opt)
    : Module("batch_norm2d"), c_(channels), opt_(opt) {
  if (c_ <= 0)
    throw std::invalid_argument(
        fmt::format("mixp::nn::BatchNorm2d: channels must be positive, got {}", c_));
  if (opt.affine) {
    weight_ = &register_parameter("weight", ones({c_}));
    bias_ = &register_parameter("bias", zeros({c_}));
  } else {
    weight_ = bias_ = &none_;
  }
  running_mean_ = &register_buffer("running_mean", zeros({c_}));
  running_var_ = &register_buffer("running_var", ones({c_}));
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  if (x.dim() != 4 || x.size(1) != c_) {
    throw std::invalid_argument(
        fmt::format("mixp::nn::BatchNorm2d({}): input must be [N, {}, H, W], got {}", c_, c_,
                    x.defined() ? x.shape().str() : "(undefined)"));
  }
  return batch_norm(x, *running_mean_, *running_var_, *weight_, *bias_, is_training(),
                    opt_.momentum, opt_.eps);
}

std::string BatchNorm2d::describe() const {
  return fmt::format("channels={}, eps={}, momentum={}", c_, opt_.eps, opt_.momentum);
}

}  // namespace mixp::nn
