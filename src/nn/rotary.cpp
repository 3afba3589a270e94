#include "mixp/nn/rotary.h"

#include <fmt/format.h>

#include <cmath>
#include <numbers>
#include <stdexcept>

#include "mixp/tensor/factories.h"

namespace mixp::nn {

std::string rope_scaling_name(RopeScaling::Type t) {
  switch (t) {
    case RopeScaling::Type::none:
      return "default";
    case RopeScaling::Type::linear:
      return "linear";
    case RopeScaling::Type::llama3:
      return "llama3";
  }
  return "?";
}

std::vector<double> rope_inv_freq(int64_t head_dim, double theta, const RopeScaling& s) {
  if (head_dim <= 0 || head_dim % 2 != 0)
    throw std::invalid_argument(
        fmt::format("mixp::nn::rope: the head dim must be even and positive, got {}", head_dim));
  if (!(theta > 1.0) || !std::isfinite(theta))
    throw std::invalid_argument(
        fmt::format("mixp::nn::rope: rope_theta must be > 1, got {}", theta));
  if (s.type != RopeScaling::Type::none && !(s.factor >= 1.0 && std::isfinite(s.factor)))
    throw std::invalid_argument(
        fmt::format("mixp::nn::rope: rope_scaling factor must be >= 1, got {}", s.factor));
  const int64_t h = head_dim / 2;
  std::vector<double> f(static_cast<size_t>(h));
  for (int64_t j = 0; j < h; ++j)
    f[size_t(j)] = 1.0 / std::pow(theta, double(2 * j) / double(head_dim));
  if (s.type == RopeScaling::Type::linear) {
    for (double& v : f) v /= s.factor;
  } else if (s.type == RopeScaling::Type::llama3) {
    if (!(s.high_freq_factor > s.low_freq_factor) || !(s.low_freq_factor > 0) ||
        s.original_max_position_embeddings <= 0)
      throw std::invalid_argument(fmt::format(
          "mixp::nn::rope: llama3 rope_scaling needs high_freq_factor > low_freq_factor > 0 and "
          "original_max_position_embeddings > 0, got {}, {}, {}",
          s.high_freq_factor, s.low_freq_factor, s.original_max_position_embeddings));
    // transformers' _compute_llama3_parameters, in double.
    const double old_len = double(s.original_max_position_embeddings);
    const double low_wavelen = old_len / s.low_freq_factor;
    const double high_wavelen = old_len / s.high_freq_factor;
    for (double& v : f) {
      const double wavelen = 2.0 * std::numbers::pi / v;
      if (wavelen > low_wavelen) {
        v /= s.factor;
      } else if (!(wavelen < high_wavelen)) {
        const double smooth =
            (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        v = (1.0 - smooth) * v / s.factor + smooth * v;
      }
    }
  }
  return f;
}

std::pair<Tensor, Tensor> rope_tables(int64_t head_dim, int64_t positions, double theta,
                                      const RopeScaling& s) {
  const std::vector<double> f = rope_inv_freq(head_dim, theta, s);
  const int64_t h = head_dim / 2;
  Tensor c = Tensor::empty({positions, h}, {.dtype = DType::fp32});
  Tensor sn = Tensor::empty({positions, h}, {.dtype = DType::fp32});
  float* cp = static_cast<float*>(c.data_ptr());
  float* sp = static_cast<float*>(sn.data_ptr());
  for (int64_t t = 0; t < positions; ++t) {
    for (int64_t j = 0; j < h; ++j) {
      const double a = double(t) * f[size_t(j)];
      cp[t * h + j] = static_cast<float>(std::cos(a));
      sp[t * h + j] = static_cast<float>(std::sin(a));
    }
  }
  return {c, sn};
}

}  // namespace mixp::nn
