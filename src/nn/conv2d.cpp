#include "mixp/nn/conv2d.h"

#include <fmt/format.h>

#include <stdexcept>

#include "mixp/nn/init.h"

namespace mixp::nn {

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Generator& gen,
               const Conv2dOptions& opt)
    : Module("conv2d"), in_(in_channels), out_(out_channels), k_(kernel_size) {
  if (in_ <= 0 || out_ <= 0 || k_ <= 0 || opt.stride <= 0 || opt.padding < 0) {
    throw std::invalid_argument(
        fmt::format("mixp::nn::Conv2d: need positive channels/kernel/stride and padding >= 0, got "
                    "in={} out={} k={} stride={} padding={}",
                    in_, out_, k_, opt.stride, opt.padding));
  }
  params_.stride_h = params_.stride_w = opt.stride;
  params_.pad_h = params_.pad_w = opt.padding;
  const int64_t fan_in = in_ * k_ * k_;
  weight_ =
      &register_parameter("weight", init::kaiming_uniform_sqrt5({out_, in_, k_, k_}, fan_in, gen));
  bias_ =
      opt.bias ? &register_parameter("bias", init::fan_in_uniform({out_}, fan_in, gen)) : &no_bias_;
}

Tensor Conv2d::forward(const Tensor& x) {
  if (x.dim() != 4 || x.size(1) != in_) {
    throw std::invalid_argument(
        fmt::format("mixp::nn::Conv2d({} -> {}): input must be [N, {}, H, W], got {}", in_, out_,
                    in_, x.defined() ? x.shape().str() : "(undefined)"));
  }
  return conv2d(x, *weight_, *bias_, params_);
}

std::string Conv2d::describe() const {
  return fmt::format("in={}, out={}, kernel={}, stride={}, padding={}", in_, out_, k_,
                     params_.stride_h, params_.pad_h);
}

}  // namespace mixp::nn
