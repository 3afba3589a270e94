// MaxPool2d on NCHW (torch.nn.MaxPool2d): stride defaults to the kernel size.
#pragma once
#include "mixp/nn/module.h"

namespace mixp::nn {

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(int64_t kernel, int64_t stride = 0, int64_t padding = 0);
  Tensor forward(const Tensor& x) override;
  int64_t kernel() const { return kernel_; }
  int64_t stride() const { return stride_; }  // 0: the kernel size
  int64_t padding() const { return padding_; }

 protected:
  std::string describe() const override;

 private:
  int64_t kernel_, stride_, padding_;
};

}  // namespace mixp::nn
