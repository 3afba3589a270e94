#include "mixp/optim/adam.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace mixp::optim {

namespace {
constexpr double kAdamWDefaultWeightDecay = 0.01;  // torch.optim.AdamW

const AdamOptions& checked(const AdamOptions& o, bool decoupled) {
  const char* who = decoupled ? "AdamW" : "Adam";
  if (!(o.beta1 >= 0.0 && o.beta1 < 1.0) || !(o.beta2 >= 0.0 && o.beta2 < 1.0)) {
    throw std::invalid_argument(fmt::format(
        "mixp::optim::{}: betas must be in [0, 1), got ({}, {})", who, o.beta1, o.beta2));
  }
  if (!(o.eps >= 0.0))
    throw std::invalid_argument(
        fmt::format("mixp::optim::{}: eps must be >= 0, got {}", who, o.eps));
  if (o.weight_decay && !(*o.weight_decay >= 0.0)) {
    throw std::invalid_argument(
        fmt::format("mixp::optim::{}: weight_decay must be >= 0, got {}", who, *o.weight_decay));
  }
  return o;
}
}  // namespace

Adam::Adam(const std::vector<Tensor>& params, const AdamOptions& opt)
    : Adam(name_by_index(params), opt, false) {}
Adam::Adam(NamedTensors params, const AdamOptions& opt) : Adam(std::move(params), opt, false) {}

Adam::Adam(NamedTensors params, const AdamOptions& opt, bool decoupled)
    : Optimizer(std::move(params), checked(opt, decoupled).lr, opt.precision,
                {"exp_avg", "exp_avg_sq"}),
      opt_(opt),
      decoupled_(decoupled),
      weight_decay_(opt.weight_decay.value_or(decoupled ? kAdamWDefaultWeightDecay : 0.0)) {
  opt_.weight_decay = weight_decay_;
}

AdamW::AdamW(const std::vector<Tensor>& params, const AdamOptions& opt)
    : Adam(name_by_index(params), opt, true) {}
AdamW::AdamW(NamedTensors params, const AdamOptions& opt) : Adam(std::move(params), opt, true) {}

UpdateRule Adam::update_rule(int64_t step) const {
  // Step scalars in double, then rounded to T by the kernel, as PyTorch computes them in Python
  // and hands them to its fp32 kernels. The unused weight-decay form gets an exact neutral factor
  // (0 for the L2 term: g + 0 * w == g for finite w; 1 for the decoupled decay), so the loop has
  // no branches.
  const double lr = this->lr();
  const double bc1 = 1.0 - std::pow(opt_.beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(opt_.beta2, static_cast<double>(step));
  UpdateRule r;
  r.kind = UpdateRule::Kind::adam;
  const double s[9] = {opt_.beta1,
                       opt_.beta2,
                       1.0 - opt_.beta1,
                       1.0 - opt_.beta2,
                       opt_.eps,
                       decoupled_ ? 0.0 : weight_decay_,
                       decoupled_ ? 1.0 - lr * weight_decay_ : 1.0,
                       -(lr / bc1),
                       std::sqrt(bc2)};
  std::copy(std::begin(s), std::end(s), std::begin(r.s));
  return r;
}

}  // namespace mixp::optim
