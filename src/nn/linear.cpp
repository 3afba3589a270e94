#include "mixp/nn/linear.h"

#include <fmt/format.h>

#include <stdexcept>

#include "mixp/nn/init.h"

namespace mixp::nn {

Linear::Linear(int64_t in_features, int64_t out_features, Generator& gen, const LinearOptions& opt)
    : Module("linear"), in_(in_features), out_(out_features), act_(opt.activation) {
  if (in_ <= 0 || out_ <= 0) {
    throw std::invalid_argument(
        fmt::format("mixp::nn::Linear: sizes must be positive, got in={} out={}", in_, out_));
  }
  if (opt.init_std > 0) {
    weight_ = &register_parameter("weight", init::normal({out_, in_}, opt.init_std, gen));
    if (opt.bias) bias_ = &register_parameter("bias", zeros({out_}));
  } else {
    weight_ = &register_parameter("weight", init::kaiming_uniform_sqrt5({out_, in_}, in_, gen));
    if (opt.bias) bias_ = &register_parameter("bias", init::fan_in_uniform({out_}, in_, gen));
  }
  if (!bias_) bias_ = &no_bias_;
}

Linear::Linear(const Tensor& shared_weight, const LinearOptions& opt)
    : Module("linear"), act_(opt.activation) {
  if (!shared_weight.defined() || shared_weight.dim() != 2) {
    throw std::invalid_argument(
        fmt::format("mixp::nn::Linear: a shared weight must be a 2-D [out, in] tensor, got {}",
                    shared_weight.defined() ? shared_weight.shape().str() : "(undefined)"));
  }
  out_ = shared_weight.size(0);
  in_ = shared_weight.size(1);
  weight_ = &register_parameter("weight", shared_weight);
  bias_ = opt.bias ? &register_parameter("bias", zeros({out_})) : &no_bias_;
}

Tensor Linear::forward(const Tensor& x) {
  if (x.dim() < 1 || x.size(-1) != in_) {
    throw std::invalid_argument(
        fmt::format("mixp::nn::Linear({} -> {}): input must be [..., {}], got {}", in_, out_, in_,
                    x.defined() ? x.shape().str() : "(undefined)"));
  }
  if (!branch_) return impl_ ? impl_(*this, x) : forward_default(x);
  // With a branch the activation follows the sum: the GEMM (or its implementation) runs without
  // it, and the activation is applied as its own op (the tanh GELU of forward_default).
  const Activation act = act_;
  act_ = Activation::none;
  Tensor y;
  try {
    y = impl_ ? impl_(*this, x) : forward_default(x);
  } catch (...) {
    act_ = act;
    throw;
  }
  act_ = act;
  y = y + branch_(x);
  if (act == Activation::relu) return relu(y);
  if (act == Activation::gelu) return gelu(y, GeluApprox::tanh);
  return y;
}

Tensor Linear::forward_default(const Tensor& x) {
  // In training, GELU is applied as its own op even when nothing records a gradient: the fused
  // epilogue rounds differently, and checkpoint() recomputes a segment (with recording) that it
  // first ran without; both runs must compute bit-identical activations.
  if (act_ == Activation::gelu && is_training())
    return gelu(linear(x, *weight_, *bias_, Activation::none), GeluApprox::tanh);
  return linear(x, *weight_, *bias_, act_);
}

std::string Linear::describe() const {
  const char* a = act_ == Activation::relu ? ", relu" : act_ == Activation::gelu ? ", gelu" : "";
  return fmt::format("in={}, out={}{}{}", in_, out_, bias_->defined() ? "" : ", no bias", a);
}

}  // namespace mixp::nn
