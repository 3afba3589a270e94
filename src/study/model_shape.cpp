// Decoder-only transformer shapes and their analytic cost (study/model_shape.h).
#include "mixp/study/model_shape.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "mixp/nn/llama_presets.h"

namespace mixp::study {

namespace {

struct Preset {
  const char* name;
  ModelShape shape;
};

ModelShape gpt(const char* name, int64_t layers, int64_t width, int64_t heads, int64_t context) {
  return {.name = name,
          .family = ShapeFamily::gpt2,
          .layers = layers,
          .width = width,
          .heads = heads,
          .ffn = 4 * width,
          .vocab = 50257,
          .padded_vocab = 50304,
          .context = context};
}

ModelShape llama(const char* name, int64_t layers, int64_t width, int64_t heads, int64_t ffn) {
  return {.name = name,
          .family = ShapeFamily::llama,
          .layers = layers,
          .width = width,
          .heads = heads,
          .ffn = ffn,
          .vocab = 32000,
          .padded_vocab = 32000,
          .context = 2048};
}

ModelShape llama70b() {
  ModelShape s = llama("llama2-70b", 80, 8192, 64, 28672);
  s.kv_heads = 8;
  s.context = 4096;
  return s;
}

// The trainable LLaMA-family presets (nn/llama_presets.h), one definition of their shapes.
ModelShape from_llama(const char* name) {
  const nn::LlamaConfig c = nn::llama_preset(name);
  return {.name = name,
          .family = ShapeFamily::llama,
          .layers = c.layers,
          .width = c.width,
          .heads = c.heads,
          .ffn = c.mlp_width,
          .vocab = c.vocab,
          .padded_vocab = c.vocab,
          .context = c.context,
          .kv_heads = c.kv(),
          .tied_head = c.tied_head};
}

// GPT-2 (Radford et al. 2019, table 2, as nn/models.h builds gpt2 and gpt2-medium), GPT-3 175B
// (Brown et al. 2020, table 2.1: 96 layers, d_model 12288, 96 heads, context 2048, GPT-2's
// tokenizer), LLaMA (Touvron et al. 2023, table 2; FFN hidden 11008 / 13824 from the released
// configurations).
const std::vector<Preset>& presets() {
  static const std::vector<Preset> p = {
      {"gpt2", gpt("gpt2", 12, 768, 12, 1024)},
      {"gpt2-medium", gpt("gpt2-medium", 24, 1024, 16, 1024)},
      {"gpt2-large", gpt("gpt2-large", 36, 1280, 20, 1024)},
      {"gpt2-xl", gpt("gpt2-xl", 48, 1600, 25, 1024)},
      {"gpt3-175b", gpt("gpt3-175b", 96, 12288, 96, 2048)},
      {"llama-7b", llama("llama-7b", 32, 4096, 32, 11008)},
      {"llama-13b", llama("llama-13b", 40, 5120, 40, 13824)},
      {"llama-tiny", from_llama("llama-tiny")},
      {"smollm-135m", from_llama("smollm-135m")},
      {"tinyllama-1.1b", from_llama("tinyllama-1.1b")},
      {"llama2-7b", from_llama("llama2-7b")},
      // Llama-2-70B (meta-llama/Llama-2-70b-hf config.json: 80 layers, hidden 8192, 64 heads on
      // 8 k/v heads, intermediate 28672, vocab 32000, 4096 positions): QLoRA's seed example.
      {"llama2-70b", llama70b()},
  };
  return p;
}

}  // namespace

std::vector<std::string> model_shape_presets() {
  std::vector<std::string> names;
  for (const auto& p : presets()) names.emplace_back(p.name);
  return names;
}

ModelShape model_shape_preset(std::string_view name) {
  for (const auto& p : presets()) {
    if (name == p.name) return p.shape;
  }
  throw std::invalid_argument(fmt::format("unknown model shape '{}': the presets are {}", name,
                                          fmt::join(model_shape_presets(), ", ")));
}

void validate(const ModelShape& s) {
  auto positive = [](int64_t v, const char* what) {
    if (v <= 0) throw std::invalid_argument(fmt::format("{} must be positive, got {}", what, v));
  };
  positive(s.layers, "layers");
  positive(s.width, "width");
  positive(s.heads, "heads");
  positive(s.ffn, "ffn (the FFN hidden width)");
  positive(s.vocab, "vocab");
  positive(s.context, "context");
  if (s.kv_heads < 0 || (s.kv_heads > 0 && s.heads % s.kv_heads != 0)) {
    throw std::invalid_argument(
        fmt::format("kv_heads ({}) must divide heads ({})", s.kv_heads, s.heads));
  }
  if (s.width % s.heads != 0) {
    throw std::invalid_argument(
        fmt::format("width ({}) must be a multiple of heads ({})", s.width, s.heads));
  }
  if (s.padded_vocab < s.vocab) {
    throw std::invalid_argument(
        fmt::format("the padded vocabulary ({}) must be >= vocab ({})", s.padded_vocab, s.vocab));
  }
}

namespace {

// GEMM weight values of one block: attention's q, k, v (3 C^2; k and v C^2 kv_heads / heads
// each under grouped-query attention) and output projection (C^2), and the FFN's two (GELU MLP)
// or three (SwiGLU) matrices.
int64_t block_gemm_values(const ModelShape& s) {
  const int64_t ffn_mats = s.family == ShapeFamily::llama ? 3 : 2;
  const int64_t kv = s.kv_heads > 0 ? s.kv_heads : s.heads;
  const int64_t kvw = s.width / s.heads * kv;
  return 2 * s.width * s.width + 2 * s.width * kvw + ffn_mats * s.width * s.ffn;
}

// Embedding rows times width: the token embedding, and for the untied head its own matrix.
int64_t embedding_values(const ModelShape& s) {
  return s.padded_vocab * s.width;
}

// Trainable values of one block: LLaMA adds two RMSNorm weights; GPT-2 the biases (qkv 3C, proj
// C, fc F, proj C) and two LayerNorms (weight and bias).
int64_t block_parameters(const ModelShape& s) {
  const int64_t C = s.width;
  if (s.family == ShapeFamily::llama) return block_gemm_values(s) + 2 * C;
  return block_gemm_values(s) + 3 * C + C + s.ffn + C + 4 * C;
}

}  // namespace

int64_t parameters(const ModelShape& s) {
  const int64_t C = s.width;
  if (s.family == ShapeFamily::llama) {
    // The final RMSNorm, the embedding and the untied (or tied) head.
    return s.layers * block_parameters(s) + C + (s.tied_head ? 1 : 2) * embedding_values(s);
  }
  // ln_f, the learned positions; the tied head adds nothing.
  return s.layers * block_parameters(s) + 2 * C + s.context * C + embedding_values(s);
}

int64_t gemm_weight_values(const ModelShape& s) {
  // The head's GEMM reads the (tied or own) vocab x C matrix.
  return s.layers * block_gemm_values(s) + embedding_values(s);
}

double step_gemm_flops(const ModelShape& s, int64_t tokens, int64_t seq, bool checkpointing) {
  const double N = double(tokens);
  const double block_fwd = 2.0 * double(block_gemm_values(s)) * N +
                           2.0 * 2.0 * double(seq) * double(s.width) * N;  // QK^T and PV
  const double head_fwd = 2.0 * double(embedding_values(s)) * N;
  const double passes = checkpointing ? 4.0 : 3.0;  // forward + 2 x backward (+ recompute)
  return double(s.layers) * block_fwd * passes + head_fwd * 3.0;
}

int64_t cast_copy_bytes(const ModelShape& s, const MemoryFormats& f) {
  if (f.block_cast_bits <= 0) return gemm_weight_values(s) * f.cast_bytes;
  const int64_t bf16_blocks = std::clamp<int64_t>(f.bf16_blocks, 0, s.layers);
  const double quantized =
      double((s.layers - bf16_blocks) * block_gemm_values(s)) * f.block_cast_bits / 8.0;
  return int64_t(std::ceil(quantized)) +
         (bf16_blocks * block_gemm_values(s) + embedding_values(s)) * 2;
}

AnalyticMemory analytic_memory(const ModelShape& s, int64_t batch, int64_t seq,
                               const MemoryFormats& f, bool checkpointing) {
  const int64_t P = parameters(s);
  const int64_t C = s.width, F = s.ffn, N = batch * seq;
  AnalyticMemory m;
  m.param_bytes = P * f.param_bytes;
  m.master_bytes = P * f.master_bytes;
  m.grad_bytes = P * f.grad_bytes;
  m.state_bytes = P * f.state_bytes;
  m.cast_bytes = cast_copy_bytes(s, f);
  // One block's saves per token (see the header): norm inputs 2C, attention side 2C (norm
  // output, attention output) + the packed q, k, v 3C, FFN input C and its activations (2F GELU,
  // 3F SwiGLU); the statistics (norm mean/rstd, log-sum-exp per head) are fp32 scalars per token.
  const int64_t ffn_saves = s.family == ShapeFamily::llama ? 3 * F : 2 * F;
  const int64_t per_token = (8 * C + ffn_saves) * f.save_bytes + (4 + s.heads) * 4;
  m.block_activation_bytes = N * per_token;
  // The head's moment: the final norm's input and output and the logits over the padded
  // vocabulary in the head GEMM's output format (fp32, or 16-bit where the GEMMs are), whose
  // buffer then holds their gradient (the fused classifier, nn/gpt.h); at their backward the tied
  // head's weight gradient (vocab x C) joins them.
  const int64_t head = 2 * N * C * f.save_bytes + N * s.padded_vocab * f.save_bytes;
  const int64_t blocks =
      checkpointing ? s.layers * N * C * f.residual_bytes : s.layers * m.block_activation_bytes;
  m.activation_bytes = blocks + head;
  // Cast copies: persistent (weight shadows), or per use, when only the GEMM whose backward
  // runs holds its weight's copy: the head's at (a), one block's at (a') and (a'').
  if (f.casts_per_use) m.cast_bytes = 0;
  const int64_t head_cast = f.casts_per_use ? embedding_values(s) * f.cast_bytes : 0;
  const int64_t block_cast = f.casts_per_use ? block_gemm_values(s) * f.cast_bytes : 0;
  const int64_t fixed = m.param_bytes + m.master_bytes + m.state_bytes + m.cast_bytes;
  // The head's linear frees a cast copy of its weight that only it holds before it allocates the
  // weight's gradient (ops/linalg_ops.cpp: dX first), so the two never coexist.
  m.head_peak_bytes =
      fixed + m.activation_bytes + std::max(embedding_values(s) * f.grad_bytes, head_cast);
  // The last block's backward: its saves (recomputed under checkpointing), the head's weight
  // gradient, and the FFN's two [tokens, F] activation gradients (one fp32, one in the saves'
  // format). With a small vocabulary this moment is the peak.
  const int64_t head_grad = embedding_values(s) * f.grad_bytes;
  const int64_t ffn_grads = N * F * (4 + f.save_bytes);
  const int64_t in_block =
      checkpointing ? blocks + m.block_activation_bytes : s.layers * m.block_activation_bytes;
  m.head_peak_bytes =
      std::max(m.head_peak_bytes, fixed + in_block + head_grad + ffn_grads + block_cast);
  // The first block's backward: every other gradient exists, its saves (recomputed under
  // checkpointing) and the same transients, and the residual stream's fp32 gradient.
  // With the optimizer in backward only the head's (tied) gradient is still alive there.
  const int64_t other_grads =
      f.optimizer_in_backward ? head_grad : m.grad_bytes - block_parameters(s) * f.grad_bytes;
  const int64_t first_block =
      fixed + other_grads + m.block_activation_bytes + ffn_grads + N * C * 4 + block_cast;
  m.head_peak_bytes = std::max(m.head_peak_bytes, first_block);
  // The end of backward: every gradient (in backward: the embedding's only), the fp32 gradient of
  // the embedding's output and, for a weight that is not fp32, the embedding's dense gradient
  // being added to the token embedding's (an fp32 one has its rows added in place).
  m.end_peak_bytes = fixed + (f.optimizer_in_backward ? head_grad : m.grad_bytes) + N * C * 4 +
                     (f.dense_embedding_grad ? embedding_values(s) * 4 : 0);
  if (f.optimizer_in_backward) m.grad_bytes = 0;  // none persistent
  m.peak_bytes = std::max(m.head_peak_bytes, m.end_peak_bytes);
  return m;
}

}  // namespace mixp::study
