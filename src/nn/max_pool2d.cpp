#include "mixp/nn/max_pool2d.h"

#include <fmt/format.h>

#include <stdexcept>

#include "mixp/ops/ops.h"

namespace mixp::nn {

MaxPool2d::MaxPool2d(int64_t kernel, int64_t stride, int64_t padding)
    : Module("max_pool2d"),
      kernel_(kernel),
      stride_(stride == 0 ? kernel : stride),
      padding_(padding) {
  if (kernel_ <= 0 || stride_ <= 0 || padding_ < 0) {
    throw std::invalid_argument(
        fmt::format("mixp::nn::MaxPool2d: need kernel, stride > 0 and padding >= 0, got {} {} {}",
                    kernel, stride, padding));
  }
}

Tensor MaxPool2d::forward(const Tensor& x) {
  return max_pool2d(x, kernel_, stride_, padding_);
}

std::string MaxPool2d::describe() const {
  return fmt::format("kernel={}, stride={}, padding={}", kernel_, stride_, padding_);
}

}  // namespace mixp::nn
