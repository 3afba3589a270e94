// Parameter initializers. Every one draws from an explicit Generator (tensor/generator.h), in
// row-major order, so a model built from the same seed is bit-identical.
#pragma once
#include <cstdint>

#include "mixp/tensor/factories.h"

namespace mixp::nn::init {

// PyTorch's default for Linear/Conv2d weights: kaiming_uniform_(w, a=sqrt(5)), i.e.
//   gain = sqrt(2 / (1 + a^2)) = sqrt(1/3),  bound = gain * sqrt(3 / fan_in) = 1 / sqrt(fan_in),
// w ~ U(-bound, bound). Their biases use the same bound, U(-1/sqrt(fan_in), 1/sqrt(fan_in))
// (torch/nn/modules/linear.py, reset_parameters).
Tensor kaiming_uniform_sqrt5(const Shape& shape, int64_t fan_in, Generator& gen);
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)): the default bias (and LSTM weight, with fan_in = hidden).
Tensor fan_in_uniform(const Shape& shape, int64_t fan_in, Generator& gen);
// N(0, std^2): GPT-2 style (std 0.02) and Embedding's default (std 1).
Tensor normal(const Shape& shape, double std, Generator& gen);

}  // namespace mixp::nn::init
