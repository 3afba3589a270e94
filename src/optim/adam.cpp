#include "mixp/optim/adam.h"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include "parallel_loop.h"

namespace mixp::optim {

namespace {
constexpr double kAdamWDefaultWeightDecay = 0.01;  // torch.optim.AdamW

const AdamOptions& checked(const AdamOptions& o, bool decoupled) {
  const char* who = decoupled ? "AdamW" : "Adam";
  if (!(o.beta1 >= 0.0 && o.beta1 < 1.0) || !(o.beta2 >= 0.0 && o.beta2 < 1.0)) {
    throw std::invalid_argument(fmt::format("mixp::optim::{}: betas must be in [0, 1), got ({}, {})", who, o.beta1, o.beta2));
  }
  if (!(o.eps >= 0.0)) throw std::invalid_argument(fmt::format("mixp::optim::{}: eps must be >= 0, got {}", who, o.eps));
  if (o.weight_decay && !(*o.weight_decay >= 0.0)) {
    throw std::invalid_argument(fmt::format("mixp::optim::{}: weight_decay must be >= 0, got {}", who, *o.weight_decay));
  }
  return o;
}
}  // namespace

Adam::Adam(const std::vector<Tensor>& params, const AdamOptions& opt) : Adam(name_by_index(params), opt, false) {}
Adam::Adam(NamedTensors params, const AdamOptions& opt) : Adam(std::move(params), opt, false) {}

Adam::Adam(NamedTensors params, const AdamOptions& opt, bool decoupled)
    : Optimizer(std::move(params), checked(opt, decoupled).lr, opt.precision, {"exp_avg", "exp_avg_sq"}),
      opt_(opt),
      decoupled_(decoupled),
      weight_decay_(opt.weight_decay.value_or(decoupled ? kAdamWDefaultWeightDecay : 0.0)) {
  opt_.weight_decay = weight_decay_;
}

AdamW::AdamW(const std::vector<Tensor>& params, const AdamOptions& opt) : Adam(name_by_index(params), opt, true) {}
AdamW::AdamW(NamedTensors params, const AdamOptions& opt) : Adam(std::move(params), opt, true) {}

template <class T>
void Adam::run(T* w, const T* g, T* m, T* v, int64_t n, int64_t step) const {
  // Step scalars in double, then T, as PyTorch computes them in Python and hands them to fp32 ops.
  const double lr = this->lr();
  const double bc1 = 1.0 - std::pow(opt_.beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(opt_.beta2, static_cast<double>(step));
  const T neg_step_size = static_cast<T>(-(lr / bc1));
  const T bc2_sqrt = static_cast<T>(std::sqrt(bc2));
  const T b1 = static_cast<T>(opt_.beta1), b2 = static_cast<T>(opt_.beta2);
  const T one_m_b1 = static_cast<T>(1.0 - opt_.beta1), one_m_b2 = static_cast<T>(1.0 - opt_.beta2);
  const T eps = static_cast<T>(opt_.eps);
  const T wd = static_cast<T>(weight_decay_);
  const T decay = static_cast<T>(1.0 - lr * weight_decay_);
  const bool l2 = !decoupled_ && weight_decay_ != 0.0, decoupled = decoupled_ && weight_decay_ != 0.0;
  parallel_loop(n, [=](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) {
      T wi = w[i];
      const T gi = l2 ? g[i] + wd * wi : g[i];
      if (decoupled) wi = wi * decay;
      const T mi = m[i] * b1 + one_m_b1 * gi;
      const T vi = v[i] * b2 + one_m_b2 * (gi * gi);
      m[i] = mi;
      v[i] = vi;
      const T denom = std::sqrt(vi) / bc2_sqrt + eps;
      // addcdiv_(m, denom, value=-step_size) evaluates value * m / denom, left to right.
      w[i] = wi + (neg_step_size * mi) / denom;
    }
  });
}

void Adam::update(float* w, const float* g, float* const* slots, int64_t n, int64_t step) {
  run<float>(w, g, slots[0], slots[1], n, step);
}
void Adam::update(double* w, const double* g, double* const* slots, int64_t n, int64_t step) {
  run<double>(w, g, slots[0], slots[1], n, step);
}

}  // namespace mixp::optim
