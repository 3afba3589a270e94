// Linear: y = act(x W^T + b), x [..., in] -> [..., out] (torch.nn.Linear, with an optional fused
// activation: ReLU is fused into the GEMM by oneDNN; GELU is fused in eval mode only, see
// linear.cpp).
//
// The computation can be swapped while the parameters stay in place: set_forward_impl installs a
// function that forward() runs instead of the default (after the shape check). The FP8 recipes
// use it to run the layer's GEMM in fp8 (mixp/amp/fp8_linear.h); forward_default() is the
// original computation, for implementations that fall back to it.
//
// An additive branch (set_branch) adds f(x) to the pre-activation output: y = act(x W^T + b +
// f(x)). LoRA (mixp/nn/lora.h) installs its adapter this way, so that it composes with any
// forward implementation (the FP8 GEMM of the frozen base) and adds before a fused activation, as
// PEFT's lora.Linear does on Hugging Face's GPT-2 (whose c_fc applies GELU after the layer).
#pragma once
#include <functional>

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
  // A layer whose weight [out, in] is `shared_weight` itself, another module's parameter (weight
  // tying: GPT-2's LM head uses the token embedding). Nothing is drawn; opt.bias adds a zero bias;
  // opt.init_std is ignored. named_parameters() lists the shared tensor once, under its first name.
  Linear(const Tensor& shared_weight, const LinearOptions& opt);
  Tensor forward(const Tensor& x) override;
  // What forward() computes without a forward implementation installed.
  Tensor forward_default(const Tensor& x);

  using ForwardImpl = std::function<Tensor(Linear& self, const Tensor& x)>;
  // Replaces forward's computation; an empty function restores the default.
  void set_forward_impl(ForwardImpl impl) { impl_ = std::move(impl); }
  const ForwardImpl& forward_impl() const { return impl_; }

  using Branch = std::function<Tensor(const Tensor& x)>;
  // Adds branch(x) [..., out] to the pre-activation output; an empty function removes it.
  void set_branch(Branch branch) { branch_ = std::move(branch); }
  bool has_branch() const { return bool(branch_); }
  const Branch& branch() const { return branch_; }

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
  ForwardImpl impl_;
  Branch branch_;
};

}  // namespace mixp::nn
