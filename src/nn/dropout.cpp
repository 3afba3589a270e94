#include "mixp/nn/dropout.h"

#include <fmt/format.h>

#include <stdexcept>

#include "mixp/ops/ops.h"

namespace mixp::nn {

Dropout::Dropout(double p, uint64_t seed) : Module("dropout"), p_(p), gen_(seed) {
  if (!(p >= 0.0 && p < 1.0))
    throw std::invalid_argument(fmt::format("mixp::nn::Dropout: p must be in [0, 1), got {}", p));
}

Tensor Dropout::forward(const Tensor& x) {
  return dropout(x, p_, is_training(), gen_);
}

std::string Dropout::describe() const {
  return fmt::format("p={}", p_);
}

}  // namespace mixp::nn
