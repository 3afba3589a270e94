// The character-level GPT of docs/architecture.md 5b (GPT-2 architecture, nanoGPT / llm.c layout):
//   x = tok_emb(idx) + pos_emb(0..T-1)        learned position embeddings
//   x = blocks.i(x)  for i < layers          pre-LayerNorm TransformerBlock (GELU-tanh MLP)
//   logits = head(ln_f(x))                   final LayerNorm, untied head without bias
// Input: int32/int64 token ids [B, T] with T <= context; output: logits [B, T, vocab] (fp32).
//
// Init (GPT-2, Radford et al. 2019, section 2.3; nanoGPT's _init_weights): every Linear and
// Embedding weight ~ N(0, 0.02^2), biases 0, LayerNorm weight 1 and bias 0; the two residual
// projections of each block (attn.proj, mlp.proj) ~ N(0, (0.02 / sqrt(2 * layers))^2), because
// each block adds two residual branches and their sum's variance grows with depth.
// (bench/peers/peer_models.py draws every weight from N(0, 0.02^2) without the residual scaling;
// the parameter shapes are identical.) Draw order: tok_emb, pos_emb, blocks.0 (attn.qkv,
// attn.proj, mlp.fc, mlp.proj), blocks.1, ..., head.
//
// GPT-2 proper (models "gpt2", "gpt2-medium"; nn/models.h) sets `tied_head`: the LM head has no
// weight of its own but multiplies by the token embedding's (GPT-2's wte / lm_head tying, one
// parameter listed once as tok_emb.weight), so the head draws nothing from the generator. With
// `padded_vocab` > vocab the embedding has padded_vocab rows (llm.c pads 50257 to 50304 so the
// head's GEMM has a multiple of 64 columns); rows vocab.. start at zero, and forward() returns
// only the first `vocab` logits, so the padding never enters the loss (llm.c's softmax also stops
// at vocab).
//
// The loss in forward (nanoGPT's forward(idx, targets)): while next-token targets are set
// (set_loss_targets), forward() returns the mean cross-entropy of its logits against them instead
// of the logits, computed by the fused classifier (ops.h, cross_entropy_in_place) on the head's
// padded output: no [B*T, vocab] slice, fp32 copy or padded gradient next to the logits, whose
// buffer receives their gradient (docs/benchmarks.md, "GPT-2 124M memory at B8 T256"). The loss
// and gradients are bit for bit those of cross_entropy on forward()'s logits. The Trainer sets the
// targets around its training forward (src/train/trainer.cpp), which still runs through the
// model's forward wrapper (a recipe's input and output casts).
//
// Gradient checkpointing: with `checkpointing`, each block runs under autograd checkpoint(), so
// backward recomputes its activations instead of keeping them (only block inputs are stored).
#pragma once
#include "mixp/nn/embedding.h"
#include "mixp/nn/layer_norm.h"
#include "mixp/nn/linear.h"
#include "mixp/nn/transformer_block.h"

namespace mixp::nn {

struct GptConfig {
  int64_t vocab = 256;
  int64_t context = 128;
  int64_t width = 256;
  int64_t layers = 4;
  int64_t heads = 4;
  int64_t mlp_width = 1024;
  bool checkpointing = false;
  bool tied_head = false;    // the head multiplies by tok_emb.weight (GPT-2)
  int64_t padded_vocab = 0;  // rows of tok_emb; 0 = vocab (must be >= vocab)
};

class Gpt : public Module {
 public:
  Gpt(const GptConfig& cfg, Generator& gen);
  Tensor forward(const Tensor& idx) override;

  const GptConfig& config() const { return cfg_; }
  void set_checkpointing(bool on) { cfg_.checkpointing = on; }
  TransformerBlock& block(size_t i) { return *blocks_.at(i); }
  // Next-token ids [B, T] or [B * T] (int64/int32) for forward() to return the loss against;
  // an undefined tensor restores the logits.
  void set_loss_targets(Tensor targets) { loss_targets_ = std::move(targets); }
  // Rows of the token embedding (padded_vocab, or vocab when there is no padding).
  int64_t embedding_rows() const { return cfg_.padded_vocab > 0 ? cfg_.padded_vocab : cfg_.vocab; }

 protected:
  std::string describe() const override;

 private:
  GptConfig cfg_;
  std::shared_ptr<Embedding> tok_emb_, pos_emb_;
  std::vector<std::shared_ptr<TransformerBlock>> blocks_;
  std::shared_ptr<LayerNorm> ln_f_;
  std::shared_ptr<Linear> head_;
  Tensor positions_;  // int64 0..context-1; not a buffer (never saved), like nanoGPT's
  Tensor loss_targets_;  // set_loss_targets
};

}  // namespace mixp::nn
