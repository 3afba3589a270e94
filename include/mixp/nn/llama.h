// The LLaMA family (Llama 1/2/3, Mistral, Qwen2, SmolLM, TinyLlama; docs/llama.md), with the
// module names of Hugging Face's LlamaForCausalLM minus its "model." prefix, so that a checkpoint's
// tensor "model.layers.3.self_attn.q_proj.weight" is this model's parameter
// "layers.3.self_attn.q_proj.weight" (nn/llama_hf.h):
//   x = embed_tokens(idx)                                     [B, T, C]
//   x = layers.i(x)  for i < layers                           LlamaBlock, pre-norm:
//       h = x + self_attn(input_layernorm(x))
//       x = h + mlp(post_attention_layernorm(h))
//   logits = lm_head(norm(x))                                 untied (or tied: tie_word_embeddings)
// self_attn: q_proj C -> H D, k_proj and v_proj C -> Hkv D (grouped-query attention when
// Hkv < H: each k/v head serves H / Hkv query heads), RoPE on q and k (nn/rotary.h), causal
// softmax attention with scale 1/sqrt(D), o_proj H D -> C; q/k/v biases with qkv_bias (Qwen2),
// no other bias. mlp: down_proj(silu(gate_proj(x)) * up_proj(x)) (SwiGLU), no biases. Norms are
// RMSNorm (nn/rms_norm.h) with eps rms_eps.
//
// Grouped-query attention reuses the multi-head attention kernel: k and v are expanded to H heads
// (a copy of [B, T, H, D] each; backward sums the copies' gradients back per k/v head) and q, k, v
// are laid side by side for ops.h's attention_packed_qkv (no [T, T] tensor is ever stored).
//
// Init (HF's LlamaPreTrainedModel._init_weights): every Linear and Embedding weight ~ N(0, 0.02^2),
// biases 0, norm weights 1; draw order embed_tokens, layers.0 (q, k, v, o, gate, up, down), ...,
// lm_head. Input: int32/int64 token ids [B, T] with T <= context; output: fp32 logits [B, T, vocab].
// With `checkpointing` each block runs under autograd checkpoint().
#pragma once
#include "mixp/nn/embedding.h"
#include "mixp/nn/linear.h"
#include "mixp/nn/rms_norm.h"
#include "mixp/nn/rotary.h"

namespace mixp::nn {

struct LlamaConfig {
  int64_t vocab = 256;
  int64_t context = 128;     // max_position_embeddings
  int64_t width = 128;       // hidden_size
  int64_t layers = 2;        // num_hidden_layers
  int64_t heads = 4;         // num_attention_heads
  int64_t kv_heads = 0;      // num_key_value_heads; 0 = heads
  int64_t mlp_width = 344;   // intermediate_size
  double rms_eps = 1e-5;     // rms_norm_eps
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tied_head = false;    // tie_word_embeddings
  bool qkv_bias = false;     // Qwen2's q/k/v biases
  bool checkpointing = false;

  int64_t kv() const { return kv_heads > 0 ? kv_heads : heads; }
  int64_t head_dim() const { return width / heads; }
  // Throws std::invalid_argument naming the first inconsistent field.
  void validate() const;
  // Parameters of this shape (counted without allocating anything).
  int64_t parameter_count() const;
};

// SwiGLU's gating (Shazeer 2020): silu(gate) * up = gate sigmoid(gate) up, composed of the
// pointwise ops (their kernels and autocast rules; a fused kernel is future work).
Tensor swiglu(const Tensor& gate, const Tensor& up);

// The attention of a LlamaAttention between its projections: q [B, T, H D], k and v [B, T, Hkv D]
// (the projections' outputs) -> [B, T, H D], RoPE applied to q and k with the tables cos/sin
// [>= T, D/2]. Differentiable in q, k and v (tests/ops/test_llama_ops.cpp gradchecks it in fp64).
Tensor llama_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cos,
                       const Tensor& sin, int64_t heads, int64_t kv_heads);

class LlamaAttention : public Module {
 public:
  LlamaAttention(const LlamaConfig& cfg, Generator& gen);
  Tensor forward(const Tensor& x) override;  // [B, T, C] -> [B, T, C]; needs set_rope first
  // The angle tables [>= T, D/2] (owned by the model, shared by every layer).
  void set_rope(Tensor cos, Tensor sin) { cos_ = std::move(cos), sin_ = std::move(sin); }

 protected:
  std::string describe() const override;

 private:
  int64_t width_, heads_, kv_heads_, head_dim_;
  std::shared_ptr<Linear> q_, k_, v_, o_;
  Tensor cos_, sin_;
};

class LlamaMlp : public Module {
 public:
  LlamaMlp(int64_t width, int64_t mlp_width, Generator& gen);
  Tensor forward(const Tensor& x) override;

 private:
  std::shared_ptr<Linear> gate_, up_, down_;
};

class LlamaBlock : public Module {
 public:
  LlamaBlock(const LlamaConfig& cfg, Generator& gen);
  Tensor forward(const Tensor& x) override;
  LlamaAttention& attention() { return *attn_; }

 private:
  std::shared_ptr<RMSNorm> ln1_, ln2_;
  std::shared_ptr<LlamaAttention> attn_;
  std::shared_ptr<LlamaMlp> mlp_;
};

class Llama : public Module {
 public:
  Llama(const LlamaConfig& cfg, Generator& gen);
  Tensor forward(const Tensor& idx) override;
  const LlamaConfig& config() const { return cfg_; }
  void set_checkpointing(bool on) { cfg_.checkpointing = on; }

 protected:
  std::string describe() const override;

 private:
  LlamaConfig cfg_;
  std::shared_ptr<Embedding> embed_;
  std::vector<std::shared_ptr<LlamaBlock>> blocks_;
  std::shared_ptr<RMSNorm> norm_;
  std::shared_ptr<Linear> head_;
};

}  // namespace mixp::nn
