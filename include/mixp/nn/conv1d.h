// Conv1d: NCL input, OCK weight, groups 1 (torch.nn.Conv1d). kind "conv1d". PyTorch's default
// init: kaiming-uniform a=sqrt(5) with fan_in = in_channels * kernel_size, bias
// U(+-1/sqrt(fan_in)). Runs ops.h conv1d (conv2d with H = 1: oneDNN, autocast lower_precision).
#pragma once
#include "mixp/nn/module.h"
#include "mixp/ops/ops.h"

namespace mixp::nn {

struct Conv1dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  bool bias = true;
};

class Conv1d : public Module {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Generator& gen,
         const Conv1dOptions& opt = {});
  Tensor forward(const Tensor& x) override;  // [N, in, L] -> [N, out, L']

  const Tensor& weight() const { return *weight_; }  // [out, in, k]
  const Tensor& bias() const { return *bias_; }      // [out] or undefined
  int64_t in_channels() const { return in_; }
  int64_t out_channels() const { return out_; }
  int64_t kernel_size() const { return k_; }
  const Conv1dOptions& options() const { return opt_; }

 protected:
  std::string describe() const override;

 private:
  int64_t in_, out_, k_;
  Conv1dOptions opt_;
  Tensor* weight_ = nullptr;
  Tensor* bias_ = nullptr;
  Tensor no_bias_;
};

}  // namespace mixp::nn
