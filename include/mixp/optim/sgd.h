// SGD with momentum, dampening, Nesterov and L2 weight decay, exactly torch.optim.SGD:
//   d = g + weight_decay * w
//   if momentum != 0:
//     b = d                                    at this parameter's first step
//     b = momentum * b + (1 - dampening) * d   after
//     d = nesterov ? d + momentum * b : b
//   w = w - lr * d
// State slot (momentum != 0 only): "momentum_buffer".
#pragma once
#include <vector>

#include "mixp/optim/optimizer.h"

namespace mixp::optim {

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;  // needs momentum > 0 and dampening 0 (PyTorch)
  double weight_decay = 0.0;
  PrecisionOptions precision{};
};

class SGD : public Optimizer {
 public:
  SGD(const std::vector<Tensor>& params, const SGDOptions& opt = {});
  SGD(NamedTensors params, const SGDOptions& opt = {});
  std::string name() const override { return "sgd"; }
  const SGDOptions& options() const { return opt_; }

 protected:
  UpdateRule update_rule(int64_t step) const override;

 private:
  SGDOptions opt_;
};

}  // namespace mixp::optim
