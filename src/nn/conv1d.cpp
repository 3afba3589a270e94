#include "mixp/nn/conv1d.h"

#include <fmt/format.h>

#include <stdexcept>

#include "mixp/nn/init.h"

namespace mixp::nn {

Conv1d::Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Generator& gen,
               const Conv1dOptions& opt)
    : Module("conv1d"), in_(in_channels), out_(out_channels), k_(kernel_size), opt_(opt) {
  if (in_ <= 0 || out_ <= 0 || k_ <= 0 || opt.stride <= 0 || opt.dilation <= 0 || opt.padding < 0) {
    throw std::invalid_argument(
        fmt::format("mixp::nn::Conv1d: need positive channels/kernel/stride/dilation and padding "
                    ">= 0, got in={} out={} k={} stride={} padding={} dilation={}",
                    in_, out_, k_, opt.stride, opt.padding, opt.dilation));
  }
  const int64_t fan_in = in_ * k_;
  weight_ =
      &register_parameter("weight", init::kaiming_uniform_sqrt5({out_, in_, k_}, fan_in, gen));
  bias_ =
      opt.bias ? &register_parameter("bias", init::fan_in_uniform({out_}, fan_in, gen)) : &no_bias_;
}

Tensor Conv1d::forward(const Tensor& x) {
  if (x.dim() != 3 || x.size(1) != in_) {
    throw std::invalid_argument(
        fmt::format("mixp::nn::Conv1d({} -> {}): input must be [N, {}, L], got {}", in_, out_, in_,
                    x.defined() ? x.shape().str() : "(undefined)"));
  }
  return conv1d(x, *weight_, *bias_, opt_.stride, opt_.padding, opt_.dilation);
}

std::string Conv1d::describe() const {
  return fmt::format("in={}, out={}, kernel={}, stride={}, padding={}, dilation={}", in_, out_, k_,
                     opt_.stride, opt_.padding, opt_.dilation);
}

}  // namespace mixp::nn
