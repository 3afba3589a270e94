// Flatten dims [start_dim, end_dim] into one (torch.nn.Flatten: start_dim 1, end_dim -1), so
// [N, 1, 28, 28] -> [N, 784]; a view when the input is contiguous.
#pragma once
#include "mixp/nn/module.h"

namespace mixp::nn {

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1)
      : Module("flatten"), start_(start_dim), end_(end_dim) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_, end_); }
  int64_t start_dim() const { return start_; }
  int64_t end_dim() const { return end_; }

 private:
  int64_t start_, end_;
};

}  // namespace mixp::nn
