// The QAT versions of Linear, Conv2d, BatchNorm2d and ReLU that prepare_qat (qat.h) swaps into a
// model. Each keeps the original's parameters and buffers — the same tensors, under the same names
// ("fc1.weight", "bn1.running_mean") — so the optimizer, checkpoints and per-layer rules see the
// model unchanged, and adds its fake-quantization modules as children (PyTorch's names):
//
//   weight_fake_quant        QatLinear / QatConv2d: per-channel (axis 0) fake quantization of
//                            the weight, applied at every forward
//   input_fake_quant         on the model's first quantized layer: the model input (PyTorch's
//                            QuantStub)
//   activation_post_process  on the last module of a fused group (Linear; Conv2d[+BN][+ReLU]):
//                            the group's output, the activation the int8 model stores in u8
//
// forward: input fake quant (if any) -> the layer on the fake-quantized weight -> output fake
// quant (if any). QatBatchNorm2d can be frozen: it then normalizes with its running statistics
// and stops updating them even in training mode (PyTorch's freeze_bn_stats).
#pragma once
#include <memory>

#include "mixp/nn/batch_norm2d.h"
#include "mixp/nn/conv2d.h"
#include "mixp/nn/linear.h"
#include "mixp/quant/fake_quantize.h"

namespace mixp::quant {

// A layer whose input and output may be fake-quantized.
class QatModule : public nn::Module {
 public:
  using nn::Module::Module;
  FakeQuantize* input_fake_quant() const { return in_.get(); }
  FakeQuantize* output_fake_quant() const { return out_.get(); }
  // Registered as children "input_fake_quant" / "activation_post_process"; once each.
  void set_input_fake_quant(std::shared_ptr<FakeQuantize> fq);
  void set_output_fake_quant(std::shared_ptr<FakeQuantize> fq);

 protected:
  Tensor quant_in(const Tensor& x) { return in_ ? in_->forward(x) : x; }
  Tensor quant_out(const Tensor& y) { return out_ ? out_->forward(y) : y; }

 private:
  std::shared_ptr<FakeQuantize> in_, out_;
};

class QatLinear : public QatModule {
 public:
  // Shares src's weight and bias; `weight_spec` must be per-channel along axis 0 or per-tensor.
  QatLinear(const nn::Linear& src, const ObserverSpec& weight_spec);
  Tensor forward(const Tensor& x) override;
  const Tensor& weight() const { return *weight_; }
  const Tensor& bias() const { return *bias_; }
  Activation activation() const { return act_; }
  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }
  FakeQuantize& weight_fake_quant() const { return *wfq_; }

 protected:
  std::string describe() const override;

 private:
  int64_t in_features_, out_features_;
  Activation act_;
  Tensor* weight_ = nullptr;
  Tensor* bias_ = nullptr;
  Tensor no_bias_;
  std::shared_ptr<FakeQuantize> wfq_;
};

class QatConv2d : public QatModule {
 public:
  QatConv2d(const nn::Conv2d& src, const ObserverSpec& weight_spec);
  Tensor forward(const Tensor& x) override;
  const Tensor& weight() const { return *weight_; }
  const Tensor& bias() const { return *bias_; }
  const Conv2dParams& params() const { return params_; }
  int64_t in_channels() const { return in_; }
  int64_t out_channels() const { return out_; }
  int64_t kernel_size() const { return k_; }
  FakeQuantize& weight_fake_quant() const { return *wfq_; }

 protected:
  std::string describe() const override;

 private:
  int64_t in_, out_, k_;
  Conv2dParams params_;
  Tensor* weight_ = nullptr;
  Tensor* bias_ = nullptr;
  Tensor no_bias_;
  std::shared_ptr<FakeQuantize> wfq_;
};

class QatBatchNorm2d : public QatModule {
 public:
  explicit QatBatchNorm2d(const nn::BatchNorm2d& src);
  Tensor forward(const Tensor& x) override;
  void freeze(bool on = true) { frozen_ = on; }
  bool frozen() const { return frozen_; }
  const Tensor& weight() const { return *weight_; }
  const Tensor& bias() const { return *bias_; }
  const Tensor& running_mean() const { return *running_mean_; }
  const Tensor& running_var() const { return *running_var_; }
  const nn::BatchNormOptions& options() const { return opt_; }
  int64_t channels() const { return c_; }

 protected:
  std::string describe() const override;

 private:
  int64_t c_;
  nn::BatchNormOptions opt_;
  bool frozen_ = false;
  Tensor* weight_ = nullptr;
  Tensor* bias_ = nullptr;
  Tensor* running_mean_ = nullptr;
  Tensor* running_var_ = nullptr;
  Tensor none_;
};

class QatReLU : public QatModule {
 public:
  QatReLU() : QatModule("relu") {}
  Tensor forward(const Tensor& x) override;
};

}  // namespace mixp::quant
