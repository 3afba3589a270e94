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
  void update(float* w, const float* g, float* const* slots, int64_t n, int64_t step) override;
  void update(double* w, const double* g, double* const* slots, int64_t n, int64_t step) override;

 private:
  template <class T>
  void run(T* w, const T* g, T* buf, int64_t n, int64_t step) const;
  SGDOptions opt_;
};

}  // namespace mixp::optim
