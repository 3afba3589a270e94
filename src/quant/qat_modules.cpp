// QAT layers; see include/mixp/quant/qat_modules.h.
#include "mixp/quant/qat_modules.h"

#include <fmt/format.h>

#include <stdexcept>

#include "mixp/ops/ops.h"

namespace mixp::quant {

namespace {
std::shared_ptr<FakeQuantize> weight_fq(const ObserverSpec& spec, int64_t out, const char* who) {
  if (spec.per_channel && spec.axis != 0) {
    throw std::invalid_argument(fmt::format(
        "mixp::quant::{}: per-channel weight quantization runs along axis 0 (output channels), "
        "got axis {}",
        who, spec.axis));
  }
  return std::make_shared<FakeQuantize>(spec, spec.per_channel ? out : 1);
}
}  // namespace

void QatModule::set_input_fake_quant(std::shared_ptr<FakeQuantize> fq) {
  in_ = register_module("input_fake_quant", std::move(fq));
}

void QatModule::set_output_fake_quant(std::shared_ptr<FakeQuantize> fq) {
  out_ = register_module("activation_post_process", std::move(fq));
}

QatLinear::QatLinear(const nn::Linear& src, const ObserverSpec& weight_spec)
    : QatModule(src.kind()),
      in_features_(src.in_features()),
      out_features_(src.out_features()),
      act_(src.activation()) {
  weight_ = &register_parameter("weight", src.weight(), src.weight().requires_grad());
  if (src.bias().defined()) {
    bias_ = &register_parameter("bias", src.bias(), src.bias().requires_grad());
  } else {
    bias_ = &no_bias_;
  }
  wfq_ = register_module("weight_fake_quant", weight_fq(weight_spec, out_features_, "QatLinear"));
}

Tensor QatLinear::forward(const Tensor& x0) {
  if (x0.dim() < 1 || x0.size(-1) != in_features_) {
    throw std::invalid_argument(fmt::format(
        "mixp::quant::QatLinear({} -> {}): input must be [..., {}], got {}", in_features_,
        out_features_, in_features_, x0.defined() ? x0.shape().str() : "(undefined)"));
  }
  const Tensor x = quant_in(x0);
  const Tensor w = wfq_->forward(*weight_);
  // GELU is not fused in training (see nn::Linear); relu and none are.
  Tensor y = act_ == Activation::gelu && is_training()
                 ? gelu(linear(x, w, *bias_, Activation::none), GeluApprox::tanh)
                 : linear(x, w, *bias_, act_);
  return quant_out(y);
}

std::string QatLinear::describe() const {
  const char* a = act_ == Activation::relu ? ", relu" : act_ == Activation::gelu ? ", gelu" : "";
  return fmt::format("qat: in={}, out={}{}{}", in_features_, out_features_,
                     bias_->defined() ? "" : ", no bias", a);
}

QatConv2d::QatConv2d(const nn::Conv2d& src, const ObserverSpec& weight_spec)
    : QatModule(src.kind()),
      in_(src.in_channels()),
      out_(src.out_channels()),
      k_(src.kernel_size()),
      params_(src.params()) {
  weight_ = &register_parameter("weight", src.weight(), src.weight().requires_grad());
  if (src.bias().defined()) {
    bias_ = &register_parameter("bias", src.bias(), src.bias().requires_grad());
  } else {
    bias_ = &no_bias_;
  }
  wfq_ = register_module("weight_fake_quant", weight_fq(weight_spec, out_, "QatConv2d"));
}

Tensor QatConv2d::forward(const Tensor& x0) {
  if (x0.dim() != 4 || x0.size(1) != in_) {
    throw std::invalid_argument(
        fmt::format("mixp::quant::QatConv2d({} -> {}): input must be [N, {}, H, W], got {}", in_,
                    out_, in_, x0.defined() ? x0.shape().str() : "(undefined)"));
  }
  const Tensor x = quant_in(x0);
  const Tensor w = wfq_->forward(*weight_);
  return quant_out(conv2d(x, w, *bias_, params_));
}

std::string QatConv2d::describe() const {
  return fmt::format("qat: in={}, out={}, kernel={}, stride={}, padding={}", in_, out_, k_,
                     params_.stride_h, params_.pad_h);
}

QatBatchNorm2d::QatBatchNorm2d(const nn::BatchNorm2d& src)
    : QatModule(src.kind()), c_(src.channels()), opt_(src.options()) {
  if (src.weight().defined()) {
    weight_ = &register_parameter("weight", src.weight(), src.weight().requires_grad());
    bias_ = &register_parameter("bias", src.bias(), src.bias().requires_grad());
  } else {
    weight_ = bias_ = &none_;
  }
  running_mean_ = &register_buffer("running_mean", src.running_mean());
  running_var_ = &register_buffer("running_var", src.running_var());
}

Tensor QatBatchNorm2d::forward(const Tensor& x) {
  if (x.dim() != 4 || x.size(1) != c_) {
    throw std::invalid_argument(
        fmt::format("mixp::quant::QatBatchNorm2d({}): input must be [N, {}, H, W], got {}", c_, c_,
                    x.defined() ? x.shape().str() : "(undefined)"));
  }
  const Tensor y = batch_norm(quant_in(x), *running_mean_, *running_var_, *weight_, *bias_,
                              is_training() && !frozen_, opt_.momentum, opt_.eps);
  return quant_out(y);
}

std::string QatBatchNorm2d::describe() const {
  return fmt::format("qat: channels={}, eps={}, momentum={}{}", c_, opt_.eps, opt_.momentum,
                     frozen_ ? ", frozen" : "");
}

Tensor QatReLU::forward(const Tensor& x) {
  return quant_out(relu(quant_in(x)));
}

}  // namespace mixp::quant
