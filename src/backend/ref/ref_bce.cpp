// Binary cross entropy (on probabilities) and its fused, autocast-safe form on logits (backend.h,
// binary_cross_entropy): plain loops over the compute dtype, summed in double. Moved unchanged
// from src/ops/loss_ops.cpp; the cpu backend uses them as they are (no faster loop exists yet).
#include <algorithm>
#include <cmath>

#include "backend/kernel_util.h"
#include "backend/ref/ref_backend.h"

namespace mixp {

namespace {
constexpr double kLogClamp = -100.0;  // PyTorch clamps log(p) and log(1 - p) at -100
constexpr double kBceEps = 1e-12;     // PyTorch's EPSILON in binary_cross_entropy_backward

double clamped_log(double v) {
  return std::max(std::log(v), kLogClamp);
}
}  // namespace

void RefBackend::binary_cross_entropy(Tensor& loss, const Tensor& x, const Tensor& target,
                                      bool logits) {
  const int64_t n = x.numel();
  kern::dispatch_float(x.dtype(), "binary_cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    const T* px = kern::ptr<const T>(x);
    const T* pt = kern::ptr<const T>(target);
    double acc = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const double v = px[i], y = pt[i];
      if (logits) {
        acc += std::max(v, 0.0) - v * y + std::log1p(std::exp(-std::abs(v)));
      } else {
        acc -= y * clamped_log(v) + (1.0 - y) * clamped_log(1.0 - v);
      }
    }
    kern::ptr<T>(loss)[0] = static_cast<T>(n ? acc / static_cast<double>(n) : std::nan(""));
  });
}

void RefBackend::binary_cross_entropy_backward(Tensor& dx, Tensor& dtarget, const Tensor& dloss,
                                               const Tensor& x, const Tensor& target, bool logits) {
  const int64_t n = x.numel();
  kern::dispatch_float(x.dtype(), "binary_cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    const double scale = static_cast<double>(kern::ptr<const T>(dloss)[0]) / static_cast<double>(n);
    const T* px = kern::ptr<const T>(x);
    const T* pt = kern::ptr<const T>(target);
    for (int64_t i = 0; i < n; ++i) {
      const double v = px[i], y = pt[i];
      if (dx.defined()) {
        const double d =
            logits ? 1.0 / (1.0 + std::exp(-v)) - y : (v - y) / std::max((1.0 - v) * v, kBceEps);
        kern::ptr<T>(dx)[i] = static_cast<T>(scale * d);
      }
      if (dtarget.defined()) {
        const double d = logits ? -v : clamped_log(1.0 - v) - clamped_log(v);
        kern::ptr<T>(dtarget)[i] = static_cast<T>(scale * d);
      }
    }
  });
}

}  // namespace mixp
