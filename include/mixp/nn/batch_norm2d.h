// BatchNorm2d over [N, C, H, W] per channel (torch.nn.BatchNorm2d): weight 1, bias 0,
// buffers running_mean 0 and running_var 1. Training normalizes with the batch statistics and
// updates the running ones in place (momentum 0.1, unbiased variance); eval uses the running ones.
// (PyTorch's num_batches_tracked is not kept: it only matters for momentum=None.)
#pragma once
#include "mixp/nn/module.h"

namespace mixp::nn {

struct BatchNormOptions {
  double eps = 1e-5;
  double momentum = 0.1;
  bool affine = true;
};

class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t channels, const BatchNormOptions& opt = {});
  Tensor forward(const Tensor& x) override;

  const Tensor& weight() const { return *weight_; }
  const Tensor& bias() const { return *bias_; }
  const Tensor& running_mean() const { return *running_mean_; }
  const Tensor& running_var() const { return *running_var_; }
  int64_t channels() const { return c_; }
  const BatchNormOptions& options() const { return opt_; }

 protected:
  std::string describe() const override;

 private:
  int64_t c_;
  BatchNormOptions opt_;
  Tensor* weight_ = nullptr;
  Tensor* bias_ = nullptr;
  Tensor* running_mean_ = nullptr;
  Tensor* running_var_ = nullptr;
  Tensor none_;
};

}  // namespace mixp::nn
