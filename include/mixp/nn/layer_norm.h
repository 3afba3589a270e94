// LayerNorm over the last dimension (torch.nn.LayerNorm(dim)): weight 1, bias 0, eps 1e-5.
#pragma once
#include "mixp/nn/module.h"

namespace mixp::nn {

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5, bool affine = true);
  Tensor forward(const Tensor& x) override;  // [..., dim] -> same shape

  const Tensor& weight() const { return *weight_; }
  const Tensor& bias() const { return *bias_; }

 protected:
  std::string describe() const override;

 private:
  int64_t dim_;
  double eps_;
  Tensor* weight_ = nullptr;
  Tensor* bias_ = nullptr;
  Tensor none_;
};

}  // namespace mixp::nn
