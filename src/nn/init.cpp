#include "mixp/nn/init.h"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

namespace mixp::nn::init {

Tensor fan_in_uniform(const Shape& shape, int64_t fan_in, Generator& gen) {
  if (fan_in <= 0)
    throw std::invalid_argument(
        fmt::format("mixp::nn::init: fan_in must be positive, got {}", fan_in));
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  return uniform(shape, -bound, bound, gen);
}

Tensor kaiming_uniform_sqrt5(const Shape& shape, int64_t fan_in, Generator& gen) {
  // gain(leaky_relu, a = sqrt(5)) * sqrt(3 / fan_in) == 1 / sqrt(fan_in), see the header.
  return fan_in_uniform(shape, fan_in, gen);
}

Tensor normal(const Shape& shape, double std, Generator& gen) {
  return mixp::normal(shape, 0.0, std, gen);
}

}  // namespace mixp::nn::init
