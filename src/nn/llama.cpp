#include "mixp/nn/llama.h"

#include <fmt/format.h>

#include <stdexcept>

#include "mixp/autograd/checkpoint.h"
#include "mixp/autograd/grad_mode.h"
#include "mixp/nn/sequential.h"
#include "mixp/ops/ops.h"

namespace mixp::nn {

namespace {
constexpr double kInitStd = 0.02;  // HF LlamaConfig.initializer_range

LinearOptions proj(bool bias) {
  return LinearOptions{.bias = bias, .init_std = kInitStd};
}
}  // namespace

void LlamaConfig::validate() const {
  if (vocab <= 0 || context <= 0 || width <= 0 || layers <= 0 || heads <= 0 || mlp_width <= 0 ||
      kv_heads < 0) {
    throw std::invalid_argument(fmt::format(
        "mixp::nn::Llama: every size must be positive, got vocab={} context={} width={} layers={} "
        "heads={} kv_heads={} mlp_width={}",
        vocab, context, width, layers, heads, kv_heads, mlp_width));
  }
  if (width % heads != 0 || (width / heads) % 2 != 0) {
    throw std::invalid_argument(fmt::format(
        "mixp::nn::Llama: width {} must be heads {} times an even head dim (RoPE rotates pairs)",
        width, heads));
  }
  if (kv() > heads || heads % kv() != 0) {
    throw std::invalid_argument(fmt::format(
        "mixp::nn::Llama: kv_heads {} must divide heads {} (grouped-query attention)", kv(),
        heads));
  }
  if (!(rms_eps > 0.0) || !(rms_eps < 1.0)) {
    throw std::invalid_argument(
        fmt::format("mixp::nn::Llama: rms_eps must be in (0, 1), got {}", rms_eps));
  }
  rope_inv_freq(head_dim(), rope_theta, rope_scaling);  // throws on a bad theta or scaling
}

int64_t LlamaConfig::parameter_count() const {
  const int64_t d = head_dim(), kvw = kv() * d;
  const int64_t attn = width * width * 2 + width * kvw * 2 + (qkv_bias ? width + 2 * kvw : 0);
  const int64_t mlp = 3 * width * mlp_width;
  const int64_t block = attn + mlp + 2 * width;
  return vocab * width * (tied_head ? 1 : 2) + layers * block + width;
}

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  return mul(mul(gate, sigmoid(gate)), up);
}

Tensor llama_attention(const Tensor& q, const Tensor& k0, const Tensor& v0, const Tensor& cos,
                       const Tensor& sin, int64_t heads, int64_t kv_heads) {
  if (!q.defined() || !k0.defined() || !v0.defined() || q.dim() != 3 || heads <= 0 ||
      kv_heads <= 0 || heads % kv_heads != 0 || q.size(2) % heads != 0 ||
      !(k0.shape() == v0.shape()) || k0.dim() != 3 || k0.size(0) != q.size(0) ||
      k0.size(1) != q.size(1) || k0.size(2) * heads != q.size(2) * kv_heads) {
    throw std::invalid_argument(fmt::format(
        "mixp::nn::llama_attention: q [B, T, H D], k and v [B, T, Hkv D] with Hkv dividing H; got "
        "q {}, k {}, v {}, heads {}, kv_heads {}",
        q.defined() ? q.shape().str() : "(undefined)",
        k0.defined() ? k0.shape().str() : "(undefined)",
        v0.defined() ? v0.shape().str() : "(undefined)", heads, kv_heads));
  }
  const int64_t B = q.size(0), T = q.size(1), C = q.size(2), H = heads, G = heads / kv_heads,
                D = C / heads;
  const Tensor qr = rope(q.reshape({B, T, H, D}), cos, sin).reshape({B, T, C});
  Tensor k = rope(k0.reshape({B, T, kv_heads, D}), cos, sin);
  Tensor v = v0;
  if (G > 1) {
    // Grouped-query attention: k/v head i serves query heads i G .. i G + G - 1 (HF's
    // repeat_kv); the expand's backward sums the G copies' gradients.
    k = k.reshape({B, T, kv_heads, 1, D}).expand({B, T, kv_heads, G, D}).reshape({B, T, C});
    v = v.reshape({B, T, kv_heads, 1, D}).expand({B, T, kv_heads, G, D}).reshape({B, T, C});
  } else {
    k = k.reshape({B, T, C});
  }
  // q, k and v side by side: the layout of the fused multi-head kernel (ops.h).
  return attention_packed_qkv(cat({qr, k, v}, 2), H, /*causal=*/true);
}

LlamaAttention::LlamaAttention(const LlamaConfig& cfg, Generator& gen)
    : Module("attention"),
      width_(cfg.width),
      heads_(cfg.heads),
      kv_heads_(cfg.kv()),
      head_dim_(cfg.head_dim()) {
  const int64_t kvw = kv_heads_ * head_dim_;
  q_ = register_module("q_proj", std::make_shared<Linear>(width_, width_, gen, proj(cfg.qkv_bias)));
  k_ = register_module("k_proj", std::make_shared<Linear>(width_, kvw, gen, proj(cfg.qkv_bias)));
  v_ = register_module("v_proj", std::make_shared<Linear>(width_, kvw, gen, proj(cfg.qkv_bias)));
  o_ = register_module("o_proj", std::make_shared<Linear>(width_, width_, gen, proj(false)));
}

Tensor LlamaAttention::forward(const Tensor& x) {
  if (!x.defined() || x.dim() != 3 || x.size(2) != width_) {
    throw std::invalid_argument(
        fmt::format("mixp::nn::LlamaAttention(width {}): input must be [B, T, {}], got {}", width_,
                    width_, x.defined() ? x.shape().str() : "(undefined)"));
  }
  if (!cos_.defined()) throw std::logic_error("mixp::nn::LlamaAttention: set_rope was not called");
  return (*o_)(llama_attention((*q_)(x), (*k_)(x), (*v_)(x), cos_, sin_, heads_, kv_heads_));
}

std::string LlamaAttention::describe() const {
  return fmt::format("width={}, heads={}, kv_heads={}", width_, heads_, kv_heads_);
}

LlamaMlp::LlamaMlp(int64_t width, int64_t mlp_width, Generator& gen) : Module("mlp") {
  gate_ =
      register_module("gate_proj", std::make_shared<Linear>(width, mlp_width, gen, proj(false)));
  up_ = register_module("up_proj", std::make_shared<Linear>(width, mlp_width, gen, proj(false)));
  down_ =
      register_module("down_proj", std::make_shared<Linear>(mlp_width, width, gen, proj(false)));
}

Tensor LlamaMlp::forward(const Tensor& x) {
  return (*down_)(swiglu((*gate_)(x), (*up_)(x)));
}

LlamaBlock::LlamaBlock(const LlamaConfig& cfg, Generator& gen) : Module("block") {
  // Registration order gives the draw order of nn/llama.h (attention, then mlp).
  ln1_ = register_module("input_layernorm", std::make_shared<RMSNorm>(cfg.width, cfg.rms_eps));
  attn_ = register_module("self_attn", std::make_shared<LlamaAttention>(cfg, gen));
  ln2_ = register_module("post_attention_layernorm",
                         std::make_shared<RMSNorm>(cfg.width, cfg.rms_eps));
  mlp_ = register_module("mlp", std::make_shared<LlamaMlp>(cfg.width, cfg.mlp_width, gen));
}

Tensor LlamaBlock::forward(const Tensor& x) {
  const Tensor h = add(x, (*attn_)((*ln1_)(x)));
  return add(h, (*mlp_)((*ln2_)(h)));
}

Llama::Llama(const LlamaConfig& cfg, Generator& gen) : Module("llama"), cfg_(cfg) {
  cfg_.validate();
  embed_ = register_module("embed_tokens",
                           std::make_shared<Embedding>(cfg.vocab, cfg.width, gen, kInitStd));
  auto layers = register_module("layers", std::make_shared<Sequential>());
  auto [cos, sin] = rope_tables(cfg.head_dim(), cfg.context, cfg.rope_theta, cfg.rope_scaling);
  for (int64_t i = 0; i < cfg.layers; ++i) {
    auto b = std::make_shared<LlamaBlock>(cfg_, gen);
    b->attention().set_rope(cos, sin);
    layers->push_back(b);
    blocks_.push_back(std::move(b));
  }
  norm_ = register_module("norm", std::make_shared<RMSNorm>(cfg.width, cfg.rms_eps));
  head_ = register_module(
      "lm_head", cfg.tied_head
                     ? std::make_shared<Linear>(embed_->weight(), LinearOptions{.bias = false})
                     : std::make_shared<Linear>(cfg.width, cfg.vocab, gen, proj(false)));
  head_->set_kind("head");
}

Tensor Llama::forward(const Tensor& idx) {
  if (!idx.defined() || idx.dim() != 2 ||
      (idx.dtype() != DType::int32 && idx.dtype() != DType::int64)) {
    throw std::invalid_argument(
        fmt::format("mixp::nn::Llama: input must be int32/int64 token ids [B, T], got {} {}",
                    idx.defined() ? std::string(name(idx.dtype())) : "(undefined)",
                    idx.defined() ? idx.shape().str() : ""));
  }
  const int64_t T = idx.size(1);
  if (T < 1 || T > cfg_.context) {
    throw std::invalid_argument(fmt::format(
        "mixp::nn::Llama: sequence length {} must be in [1, context {}]", T, cfg_.context));
  }
  Tensor x = (*embed_)(idx);
  const bool ckpt = cfg_.checkpointing && GradMode::is_enabled();
  if (ckpt) x = checkpoint_input(x);  // frozen embeddings (LoRA): autograd/checkpoint.h
  for (auto& b : blocks_) {
    if (ckpt) {
      LlamaBlock* blk = b.get();
      x = checkpoint([blk](const Tensor& in) { return (*blk)(in); }, x);
    } else {
      x = (*b)(x);
    }
  }
  return (*head_)((*norm_)(x));
}

std::string Llama::describe() const {
  return fmt::format(
      "vocab={}, context={}, width={}, layers={}, heads={}, kv_heads={}, mlp_width={}, "
      "rope_theta={}, rope_scaling={}{}{}{}",
      cfg_.vocab, cfg_.context, cfg_.width, cfg_.layers, cfg_.heads, cfg_.kv(), cfg_.mlp_width,
      cfg_.rope_theta, rope_scaling_name(cfg_.rope_scaling.type),
      cfg_.tied_head ? ", tied head" : "", cfg_.qkv_bias ? ", qkv bias" : "",
      cfg_.checkpointing ? ", checkpointing" : "");
}

}  // namespace mixp::nn
