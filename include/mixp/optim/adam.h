// Adam (Kingma & Ba 2015) and AdamW (Loshchilov & Hutter 2019), with torch.optim.Adam/AdamW's
// formulas (PyTorch docs, "Algorithm"), at this parameter's step t:
//   Adam:  g = g + weight_decay * w                      (L2 penalty through the gradient)
//   AdamW: w = w * (1 - lr * weight_decay)               (decoupled weight decay)
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g^2
//   w = w - (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// (the bias corrections are folded into the step size and the denominator exactly as PyTorch's
// _single_tensor_adam does, so results agree to fp32 rounding).
// State slots: "exp_avg" (m) and "exp_avg_sq" (v).
// Defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0 for Adam and 0.01 for AdamW
// (AdamOptions::weight_decay unset = the optimizer's default).
#pragma once
#include <optional>
#include <vector>

#include "mixp/optim/optimizer.h"

namespace mixp::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  std::optional<double> weight_decay{};  // unset: 0 for Adam, 0.01 for AdamW
  PrecisionOptions precision{};
};

class Adam : public Optimizer {
 public:
  Adam(const std::vector<Tensor>& params, const AdamOptions& opt = {});
  Adam(NamedTensors params, const AdamOptions& opt = {});
  std::string name() const override { return decoupled_ ? "adamw" : "adam"; }
  const AdamOptions& options() const { return opt_; }
  double weight_decay() const { return weight_decay_; }

 protected:
  Adam(NamedTensors params, const AdamOptions& opt, bool decoupled);
  UpdateRule update_rule(int64_t step) const override;

 private:
  AdamOptions opt_;
  bool decoupled_;
  double weight_decay_;
};

class AdamW : public Adam {
 public:
  AdamW(const std::vector<Tensor>& params, const AdamOptions& opt = {});
  AdamW(NamedTensors params, const AdamOptions& opt = {});
};

}  // namespace mixp::optim
