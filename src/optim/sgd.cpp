#include "mixp/optim/sgd.h"

#include <fmt/format.h>

#include <stdexcept>

#include "parallel_loop.h"

namespace mixp::optim {

namespace {
const SGDOptions& checked(const SGDOptions& o) {
  if (!(o.momentum >= 0.0) || !(o.dampening >= 0.0) || !(o.weight_decay >= 0.0)) {
    throw std::invalid_argument(fmt::format(
        "mixp::optim::SGD: momentum ({}), dampening ({}) and weight_decay ({}) must be >= 0",
        o.momentum, o.dampening, o.weight_decay));
  }
  if (o.nesterov && (o.momentum <= 0.0 || o.dampening != 0.0)) {
    throw std::invalid_argument(
        "mixp::optim::SGD: Nesterov momentum requires a momentum > 0 and zero dampening");
  }
  return o;
}
std::vector<std::string> slots_of(const SGDOptions& o) {
  return o.momentum != 0.0 ? std::vector<std::string>{"momentum_buffer"}
                           : std::vector<std::string>{};
}
}  // namespace

SGD::SGD(const std::vector<Tensor>& params, const SGDOptions& opt)
    : SGD(name_by_index(params), opt) {}

SGD::SGD(NamedTensors params, const SGDOptions& opt)
    : Optimizer(std::move(params), checked(opt).lr, opt.precision, slots_of(opt)), opt_(opt) {}

template <class T>
void SGD::run(T* w, const T* g, T* buf, int64_t n, int64_t step) const {
  // Scalars in T, as PyTorch passes them to its fp32 kernels.
  const T lr = static_cast<T>(this->lr()), wd = static_cast<T>(opt_.weight_decay),
          mom = static_cast<T>(opt_.momentum);
  const T damp1 = static_cast<T>(1.0 - opt_.dampening);
  const bool first = step == 1, nesterov = opt_.nesterov, has_wd = opt_.weight_decay != 0.0;
  if (!buf) {
    parallel_loop(n, [=](int64_t lo, int64_t hi) {
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) {
        const T d = has_wd ? g[i] + wd * w[i] : g[i];
        w[i] = w[i] - lr * d;
      }
    });
    return;
  }
  parallel_loop(n, [=](int64_t lo, int64_t hi) {
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) {
      const T d = has_wd ? g[i] + wd * w[i] : g[i];
      const T b = first ? d : buf[i] * mom + damp1 * d;
      buf[i] = b;
      const T step_dir = nesterov ? d + mom * b : b;
      w[i] = w[i] - lr * step_dir;
    }
  });
}

void SGD::update(float* w, const float* g, float* const* slots, int64_t n, int64_t step) {
  run<float>(w, g, opt_.momentum != 0.0 ? slots[0] : nullptr, n, step);
}
void SGD::update(double* w, const double* g, double* const* slots, int64_t n, int64_t step) {
  run<double>(w, g, opt_.momentum != 0.0 ? slots[0] : nullptr, n, step);
}

}  // namespace mixp::optim
