// A pre-LayerNorm transformer block (GPT-2):
//   x = x + attn(ln1(x))
//   x = x + mlp(ln2(x))
// Children "ln1" (layer_norm), "attn" (attention), "ln2" (layer_norm), "mlp" (mlp); kind "block".
#pragma once
#include "mixp/nn/causal_self_attention.h"
#include "mixp/nn/gpt_mlp.h"
#include "mixp/nn/layer_norm.h"

namespace mixp::nn {

struct BlockOptions {
  bool bias = true;
  double init_std = 0.0;       // weights of qkv and fc; 0 = PyTorch default init
  double proj_init_std = 0.0;  // weights of the residual projections attn.proj and mlp.proj
};

class TransformerBlock : public Module {
 public:
  TransformerBlock(int64_t width, int64_t heads, int64_t mlp_width, Generator& gen,
                   const BlockOptions& opt = {});
  Tensor forward(const Tensor& x) override;  // [B, T, C] -> [B, T, C]
  Tensor forward_owned(Tensor x) override;   // drops x after the first residual add

  CausalSelfAttention& attn() { return *attn_; }
  GptMlp& mlp() { return *mlp_; }

 private:
  std::shared_ptr<LayerNorm> ln1_, ln2_;
  std::shared_ptr<CausalSelfAttention> attn_;
  std::shared_ptr<GptMlp> mlp_;
};

}  // namespace mixp::nn
