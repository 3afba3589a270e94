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
  // The heads are read straight out of the qkv GEMM's [B, T, 3C] output and written side by side
  // into the [B, T, C] tensor the projection reads (no split or merge copies).
  return (*proj_)(attention_packed_qkv((*qkv_)(x), heads_, /*causal=*/true));
}

std::string CausalSelfAttention::describe() const {
  return fmt::format("width={}, heads={}", width_, heads_);
}

}  // namespace mixp::nn
