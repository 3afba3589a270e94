// Causal multi-head self-attention (GPT-2 / nanoGPT): x [B, T, C] ->
//   q, k, v = split(qkv(x), 3)            qkv: Linear C -> 3C (children "qkv")
//   y = softmax(q k^T / sqrt(D) + causal mask) v   per head, D = C / heads, by the fused
//       scaled_dot_product_attention of ops.h (keeps the row log-sum-exp, never the T x T matrix)
//   out = proj(merge_heads(y))            proj: Linear C -> C (child "proj", a residual projection)
// kind "attention": a per-layer precision rule `attn=...` selects the whole module.
#pragma once
#include "mixp/nn/linear.h"
#include "mixp/nn/module.h"

namespace mixp::nn {

struct AttentionOptions {
  bool bias = true;
  double init_std = 0.0;       // qkv weight std; 0 = PyTorch default init (see LinearOptions)
  double proj_init_std = 0.0;  // proj weight std; 0 = PyTorch default init
};

class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(int64_t width, int64_t heads, Generator& gen,
                      const AttentionOptions& opt = {});
  Tensor forward(const Tensor& x) override;

  Linear& qkv() { return *qkv_; }
  Linear& proj() { return *proj_; }
  int64_t heads() const { return heads_; }

 protected:
  std::string describe() const override;

 private:
  int64_t width_, heads_;
  std::shared_ptr<Linear> qkv_, proj_;
};

}  // namespace mixp::nn
