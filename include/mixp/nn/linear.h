// Linear: y = act(x W^T + b), x [..., in] -> [..., out] (torch.nn.Linear, with an optional fused
// activation: ReLU is fused into the GEMM by oneDNN; GELU is fused in eval mode only, see
// linear.cpp).
#pragma once
#include "mixp/nn/module.h"
#include "mixp/ops/ops.h"

namespace mixp::nn {

struct LinearOptions {
  bool bias = true;
  Activation activation = Activation::none;  // fused epilogue (ops.h linear)
  // 0: PyTorch's default init (kaiming-uniform a=sqrt(5), bias U(+-1/sqrt(in)); init.h).
  // > 0: weight ~ N(0, init_std^2), bias = 0 (GPT-2 style).
  double init_std = 0.0;
};

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, Generator& gen, const LinearOptions& opt = {});
  Tensor forward(const Tensor& x) override;

  const Tensor& weight() const { return *weight_; }  // [out, in]
  const Tensor& bias() const { return *bias_; }      // [out] or undefined
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  Activation activation() const { return act_; }

 protected:
  std::string describe() const override;

 private:
  int64_t in_, out_;
  Activation act_;
  Tensor* weight_ = nullptr;
  Tensor* bias_ = nullptr;
  Tensor no_bias_;
};

}  // namespace mixp::nn
