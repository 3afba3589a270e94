// Conv2d: NCHW input, OIHW weight, groups 1 (torch.nn.Conv2d). PyTorch's default init:
// kaiming-uniform a=sqrt(5) with fan_in = in_channels * kh * kw, bias U(+-1/sqrt(fan_in)).
#pragma once
#include "mixp/nn/module.h"
#include "mixp/ops/ops.h"

namespace mixp::nn {

struct Conv2dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  bool bias = true;
};

class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Generator& gen,
         const Conv2dOptions& opt = {});
  Tensor forward(const Tensor& x) override;  // [N, in, H, W] -> [N, out, H', W']

  const Tensor& weight() const { return *weight_; }  // [out, in, k, k]
  const Tensor& bias() const { return *bias_; }      // [out] or undefined
  int64_t in_channels() const { return in_; }
  int64_t out_channels() const { return out_; }
  int64_t kernel_size() const { return k_; }
  const Conv2dParams& params() const { return params_; }

 protected:
  std::string describe() const override;

 private:
  int64_t in_, out_, k_;
  Conv2dParams params_;
  Tensor* weight_ = nullptr;
  Tensor* bias_ = nullptr;
  Tensor no_bias_;
};

}  // namespace mixp::nn
