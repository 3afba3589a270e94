#include "mixp/optim/adam.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <type_traits>

#include "adam_kernel.h"
#include "parallel_loop.h"

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
// The fp64 update (fp64 parameters only): the same operations as detail::adam_f32_generic.
void adam_f64(double* w, const double* g, double* m, double* v, int64_t n, const double (&s)[9]) {
  const auto [b1, b2, one_m_b1, one_m_b2, eps, l2_wd, decay, neg_step_size, bc2_sqrt] = s;
  for (int64_t i = 0; i < n; ++i) {
    const double w0 = w[i];
    const double gi = g[i] + l2_wd * w0;
    const double wi = w0 * decay;
    const double mi = m[i] * b1 + one_m_b1 * gi;
    const double vi = v[i] * b2 + one_m_b2 * (gi * gi);
    m[i] = mi;
    v[i] = vi;
    w[i] = wi + (neg_step_size * mi) / (std::sqrt(vi) / bc2_sqrt + eps);
  }
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

void Adam::begin_update(int64_t step) {
  // Step scalars in double, then rounded to T, as PyTorch computes them in Python and hands them
  // to its fp32 kernels. The unused weight-decay form gets an exact neutral factor (0 for the L2
  // term: g + 0 * w == g for finite w; 1 for the decoupled decay), so the loop has no branches.
  const double lr = this->lr();
  const double bc1 = 1.0 - std::pow(opt_.beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(opt_.beta2, static_cast<double>(step));
  const double s[9] = {opt_.beta1,
                       opt_.beta2,
                       1.0 - opt_.beta1,
                       1.0 - opt_.beta2,
                       opt_.eps,
                       decoupled_ ? 0.0 : weight_decay_,
                       decoupled_ ? 1.0 - lr * weight_decay_ : 1.0,
                       -(lr / bc1),
                       std::sqrt(bc2)};
  std::copy(std::begin(s), std::end(s), std::begin(scalars_));
  scalars_step_ = step;
}

template <class T>
void Adam::run(T* w, const T* g, T* m, T* v, int64_t n, int64_t step) const {
  if (step != scalars_step_) {
    throw std::logic_error("mixp::optim::Adam: update() without begin_update() for this step");
  }
  const double(&s)[9] = scalars_;
  if constexpr (std::is_same_v<T, float>) {
    const detail::AdamScalars f{
        static_cast<float>(s[0]), static_cast<float>(s[1]), static_cast<float>(s[2]),
        static_cast<float>(s[3]), static_cast<float>(s[4]), static_cast<float>(s[5]),
        static_cast<float>(s[6]), static_cast<float>(s[7]), static_cast<float>(s[8])};
    const detail::AdamKernelF32 kernel = detail::adam_f32_kernel();
    parallel_loop(
        n, [&](int64_t lo, int64_t hi) { kernel(w + lo, g + lo, m + lo, v + lo, hi - lo, f); });
  } else {
    parallel_loop(
        n, [&](int64_t lo, int64_t hi) { adam_f64(w + lo, g + lo, m + lo, v + lo, hi - lo, s); });
  }
}

void Adam::update(float* w, const float* g, float* const* slots, int64_t n, int64_t step) {
  run<float>(w, g, slots[0], slots[1], n, step);
}
void Adam::update(double* w, const double* g, double* const* slots, int64_t n, int64_t step) {
  run<double>(w, g, slots[0], slots[1], n, step);
}

}  // namespace mixp::optim
