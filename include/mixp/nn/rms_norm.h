// RMSNorm over the last dimension (HF's LlamaRMSNorm, torch.nn.RMSNorm(dim, eps)): weight 1,
// eps 1e-6 by default (config.json's rms_norm_eps overrides it). kind "rms_norm"; under autocast
// it runs in fp32 like LayerNorm (amp/cast_policy.h).
#pragma once
#include "mixp/nn/module.h"

namespace mixp::nn {

class RMSNorm : public Module {
 public:
  explicit RMSNorm(int64_t dim, double eps = 1e-6);
  Tensor forward(const Tensor& x) override;  // [..., dim] -> same shape
  const Tensor& weight() const { return *weight_; }
  double eps() const { return eps_; }

 protected:
  std::string describe() const override;

 private:
  int64_t dim_;
  double eps_;
  Tensor* weight_ = nullptr;
};

}  // namespace mixp::nn
