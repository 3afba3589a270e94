// Binary cross entropy (on probabilities) and its fused, autocast-safe form on logits. These are
// element-wise losses with one implementation shared by every backend (plain loops over the
// compute dtype, summed in double), so cpu and ref agree by construction.
#include <cmath>

#include "backend/kernel_util.h"
#include "ops/dispatch.h"

namespace mixp {
using namespace detail;

namespace {
constexpr double kLogClamp = -100.0;  // PyTorch clamps log(p) and log(1 - p) at -100
constexpr double kBceEps = 1e-12;     // PyTorch's EPSILON in binary_cross_entropy_backward

double clamped_log(double v) {
  return std::max(std::log(v), kLogClamp);
}

template <class T>
const T* cptr(const Tensor& t) {
  return static_cast<const T*>(t.data_ptr());
}
template <class T>
T* mptr(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

Tensor bce_impl(OpId id, const Tensor& x0, const Tensor& t0) {
  const char* nm = op_name(id).data();
  check_float(x0, nm, id == OpId::binary_cross_entropy ? "probs" : "logits");
  check_float(t0, nm, "target");
  Tensor in[2] = {x0, t0};
  apply_cast_policy(id, in);
  const Tensor& x = in[0];
  const Tensor& t = in[1];
  if (!(x.shape() == t.shape()))
    shape_error(nm, "input and target must have the same shape", x.shape(), t.shape());
  const bool logits = id == OpId::binary_cross_entropy_with_logits;
  const DType rd = result_dtype({&x, &t});
  const DType c = compute_of(rd);
  const Tensor xc = raw_contiguous(as_compute(x, c)), tc = raw_contiguous(as_compute(t, c));
  const int64_t n = x.numel();
  Tensor loss = new_tensor(Shape{}, c);
  kern::dispatch_float(c, nm, [&](auto tag) {
    using T = decltype(tag);
    const T* px = cptr<T>(xc);
    const T* pt = cptr<T>(tc);
    double acc = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const double v = px[i], y = pt[i];
      if (logits) {
        acc += std::max(v, 0.0) - v * y + std::log1p(std::exp(-std::abs(v)));
      } else {
        acc -= y * clamped_log(v) + (1.0 - y) * clamped_log(1.0 - v);
      }
    }
    mptr<T>(loss)[0] = static_cast<T>(n ? acc / static_cast<double>(n) : std::nan(""));
  });
  Tensor out = finish(loss, rd);
  if (should_record({&x, &t})) {
    Tensor sx = xc.detach(), st = tc.detach();
    record(id, c, {&x, &t}, {&out}, [sx, st, logits, n, nm](BackwardContext& ctx) {
      const Tensor g = ctx.grad();
      Tensor gx = ctx.needs(0) ? new_tensor(sx.shape(), sx.dtype()) : Tensor();
      Tensor gt = ctx.needs(1) ? new_tensor(st.shape(), st.dtype()) : Tensor();
      kern::dispatch_float(sx.dtype(), nm, [&](auto tag) {
        using T = decltype(tag);
        const double scale =
            static_cast<double>(cptr<T>(raw_contiguous(g))[0]) / static_cast<double>(n);
        const T* px = cptr<T>(sx);
        const T* pt = cptr<T>(st);
        for (int64_t i = 0; i < n; ++i) {
          const double v = px[i], y = pt[i];
          if (gx.defined()) {
            const double d = logits ? 1.0 / (1.0 + std::exp(-v)) - y
                                    : (v - y) / std::max((1.0 - v) * v, kBceEps);
            mptr<T>(gx)[i] = static_cast<T>(scale * d);
          }
          if (gt.defined()) {
            const double d = logits ? -v : clamped_log(1.0 - v) - clamped_log(v);
            mptr<T>(gt)[i] = static_cast<T>(scale * d);
          }
        }
      });
      if (gx.defined()) ctx.grad_inputs[0] = gx;
      if (gt.defined()) ctx.grad_inputs[1] = gt;
    });
  }
  return out;
}
}  // namespace

Tensor binary_cross_entropy(const Tensor& probs, const Tensor& target) {
  return bce_impl(OpId::binary_cross_entropy, probs, target);
}
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target) {
  return bce_impl(OpId::binary_cross_entropy_with_logits, logits, target);
}

}  // namespace mixp
