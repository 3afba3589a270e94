// The analytic side of `mixp plan` (docs/plan.md, "Analytic model"): a decoder-only transformer
// described by its shape alone, its parameter count, its GEMM FLOPs per training step and the
// peak tensor memory mixp would reach training it, for shapes too large to run here (LLaMA-7B,
// GPT-3 175B) and, for the shapes mixp can run (gpt2, gpt2-medium), checked against the
// probe-based plan (tests/gpt2/test_model_shape.cpp, bench/plan_validation.py).
//
// Two families:
//   gpt2   GPT-2 / GPT-3: LayerNorm, GELU MLP (fc C -> F, proj F -> C), biases, learned positions,
//          the LM head tied to the token embedding (nn/gpt.h).
//   llama  LLaMA: RMSNorm, SwiGLU FFN (gate and up C -> F, down F -> C), rotary positions (no
//          position table), no biases, an untied head.
//
// The memory model counts what mixp's autograd keeps, by the rules the gpt2 model follows
// (measured on it with the probes; docs/plan.md lists each saved tensor):
//   - a block saves 2 norm inputs (x, h), the attention side's norm output (the qkv GEMM's
//     input), the packed q, k, v (the qkv GEMM's output, which the attention reads in place) and
//     the attention output (kept by the attention and read by the projection GEMM in place: no
//     merged-heads copy; never the T x T matrix, only a log-sum-exp per row and head), and for
//     the FFN its input (norm output), the pre-activation(s) and the activation: GELU MLP 2F,
//     SwiGLU 3F (gate, up, silu(gate) * up). 16 C per token for GPT-2 (F = 4C).
//     Widths: fp32 recipes 4 bytes; autocast and 16-bit recipes 2 bytes (16-bit norm saves).
//   - checkpointing keeps one block input per block (the residual stream's format: fp32 under
//     autocast) and recomputes one block at a time in backward.
//   - the head keeps the final norm's input and output and, at the peak (the head's backward),
//     the logits [tokens, padded vocab] in the head GEMM's output format (fp32, or 16-bit where
//     the GEMMs are), whose buffer then holds their gradient (the fused classifier, nn/gpt.h),
//     and the tied head's weight gradient.
//   - the peak is the largest of three moments: (a) the head's backward, with every saved
//     activation, the parameters, master weights, optimizer states and cast copies, and no
//     gradient yet (they were dropped by zero_grad); (a') the last block's backward, with the
//     head's weight gradient and the FFN's two [tokens, F] activation gradients (the peak when
//     the vocabulary is small); (b) the end of backward, with every gradient, the
//     [tokens, C] fp32 gradient reaching the embedding and, where the embedding weight is not
//     fp32, its dense gradient (vocab x C, fp32) being added to the token embedding's (an fp32
//     weight gets its rows added in place). Under checkpointing autocast keeps no weight shadow:
//     the cast copies count only where a backward holds them (the head's, one block's).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mixp/format/dtype.h"

namespace mixp::study {

enum class ShapeFamily { gpt2, llama };

struct ModelShape {
  std::string name;  // "gpt2", "llama-7b", "gpt3-175b", or "custom"
  ShapeFamily family = ShapeFamily::gpt2;
  int64_t layers = 12, width = 768, heads = 12;
  int64_t ffn = 3072;            // FFN hidden width (GPT: 4 C; LLaMA-7B: 11008)
  int64_t vocab = 50257;         // tokens the loss sees
  int64_t padded_vocab = 50304;  // embedding rows (>= vocab)
  int64_t context = 1024;  // the position table's rows (gpt2 family); the sequence length planned
  // llama family: k/v heads of grouped-query attention (0 = heads: multi-head attention; the k
  // and v projections are C x (C kv_heads / heads)) and a head tied to the embedding
  // (tie_word_embeddings, e.g. SmolLM).
  int64_t kv_heads = 0;
  bool tied_head = false;
};

// The preset shapes: "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "gpt3-175b", "llama-7b",
// "llama-13b", and the shapes of nn/llama_presets.h: "llama-tiny", "smollm-135m",
// "tinyllama-1.1b", "llama2-7b", and "llama2-70b" (plan only). Throws std::invalid_argument naming
// the presets for another name.
ModelShape model_shape_preset(std::string_view name);
std::vector<std::string> model_shape_presets();
// Throws std::invalid_argument naming the first field that is not positive or consistent
// (width a multiple of heads, padded_vocab >= vocab).
void validate(const ModelShape& shape);

// Trainable values (the tied head counted once, as nn::Gpt does).
int64_t parameters(const ModelShape& s);
// Values of the GEMM weights (what autocast casts to the compute format once per step).
int64_t gemm_weight_values(const ModelShape& s);

// FLOPs of the matrix products of one optimizer step of `tokens` tokens in sequences of `seq`:
// every weight GEMM forward (2 x values x tokens) and backward (twice that), attention's two
// batched products (2 x 2 x seq x C per token and layer, forward; twice that backward, causal or
// not, as mixp computes them), and with checkpointing the blocks' forward again.
double step_gemm_flops(const ModelShape& s, int64_t tokens, int64_t seq, bool checkpointing);

// The formats the memory model prices (study/step_counts.h StepPrecision and the recipe's
// RecipeDtypes give them for a recipe).
struct MemoryFormats {
  int param_bytes = 4;     // stored parameters
  int master_bytes = 0;    // fp32 master weights when the parameters are narrower (else 0)
  int grad_bytes = 4;      // gradients (mixp accumulates them in fp32: autograd/node.h)
  int state_bytes = 8;     // all optimizer states of one value (AdamW fp32: 8)
  int cast_bytes = 0;      // the GEMM weights' cast copy (autocast, FP8), per weight value
  int save_bytes = 4;      // saved activations (4 for fp32 recipes, 2 for 16-bit)
  int residual_bytes = 4;  // the residual stream (what checkpointing keeps per block)
  // Autocast without weight shadows (what the runs do under checkpointing, docs/amp.md): the cast
  // copies live only while a GEMM's backward needs them (the head's, one recomputed block's),
  // not through the whole step.
  bool casts_per_use = false;
  // The embedding's backward allocates a dense [vocab, C] fp32 gradient and adds it to the tied
  // weight's (the embedding weight is not fp32: bf16-pure, fp16 parameters); an fp32 weight has
  // its rows added in place into the gradient the head produced (ops/nn_ops.cpp).
  bool dense_embedding_grad = false;
  // The optimizer fused into backward (train_config.h optimizer_in_backward): each gradient is
  // freed by its parameter's update as soon as backward finishes it, so no moment holds them all;
  // only the tied token embedding's, which the head starts and the embedding's backward at the
  // very end completes, lives through backward. grad_bytes is then 0 (nothing persistent).
  bool optimizer_in_backward = false;
  // The block-scaled recipes (nvfp4, mxfp4, fp8-block; docs/fp4.md, docs/plan.md): the quantized
  // Linear weights' copy costs block_cast_bits per value (codes plus one block scale per tile,
  // e.g. nvfp4 with 16x16 tiles 4 + 8/256) instead of cast_bytes; the head's and the last
  // bf16_blocks blocks' weights (the layers the recipe keeps in bf16) a bf16 copy. 0: not one.
  double block_cast_bits = 0;
  int bf16_blocks = 0;
};

struct AnalyticMemory {
  int64_t param_bytes = 0, master_bytes = 0, grad_bytes = 0, state_bytes = 0, cast_bytes = 0;
  int64_t block_activation_bytes = 0;  // one block's saved activations
  int64_t activation_bytes = 0;        // every block's, plus the head's, at moment (a)
  int64_t head_peak_bytes = 0;         // moments (a) and (a'): the head's and last block's backward
  int64_t end_peak_bytes = 0;          // moment (b): the end of backward
  int64_t peak_bytes = 0;              // the larger
};

// The peak tensor memory of one training step of `batch` sequences of `seq` tokens (the second
// step, with the optimizer states: see the top of this file).
AnalyticMemory analytic_memory(const ModelShape& s, int64_t batch, int64_t seq,
                               const MemoryFormats& f, bool checkpointing);

// The GEMM weights' persistent copies in the compute format: gemm_weight_values x cast_bytes, or
// for a block-scaled recipe (f.block_cast_bits > 0) the quantized blocks' codes and scales plus a
// bf16 copy of the head and the bf16_blocks last blocks.
int64_t cast_copy_bytes(const ModelShape& s, const MemoryFormats& f);

}  // namespace mixp::study
