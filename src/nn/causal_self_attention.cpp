#include "mixp/nn/causal_self_attention.h"

#include <fmt/format.h>

#include <stdexcept>

#include "mixp/ops/ops.h"

namespace mixp::nn {

CausalSelfAttention::CausalSelfAttention(int64_t width, int64_t heads, Generator& gen,
                                         const AttentionOptions& opt)
    : Module("attention"), width_(width), heads_(heads) {
  if (width <= 0 || heads <= 0 || width % heads != 0) {
    throw std::invalid_argument(fmt::format(
        "mixp::nn::CausalSelfAttention: width ({}) must be a positive multiple of heads ({})",
        width, heads));
  }
  qkv_ = register_module(
      "qkv", std::make_shared<Linear>(width, 3 * width, gen,
                                      LinearOptions{.bias = opt.bias, .init_std = opt.init_std}));
  proj_ = register_module(
      "proj",
      std::make_shared<Linear>(width, width, gen,
                               LinearOptions{.bias = opt.bias, .init_std = opt.proj_init_std}));
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  if (x.dim() != 3 || x.size(2) != width_) {
    throw std::invalid_argument(
        fmt::format("mixp::nn::CausalSelfAttention(width {}): input must be [B, T, {}], got {}",
                    width_, width_, x.defined() ? x.shape().str() : "(undefined)"));
  }
  const int64_t B = x.size(0), T = x.size(1), D = width_ / heads_;
  const std::vector<Tensor> qkv = chunk((*qkv_)(x), 3, 2);  // three [B, T, C] views
  auto heads = [&](const Tensor& t) {
    return t.reshape({B, T, heads_, D}).transpose(1, 2);
  };  // [B, H, T, D]
  const Tensor y =
      scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), /*causal=*/true);
  return (*proj_)(y.transpose(1, 2).reshape({B, T, width_}));
}

std::string CausalSelfAttention::describe() const {
  return fmt::format("width={}, heads={}", width_, heads_);
}

}  // namespace mixp::nn
