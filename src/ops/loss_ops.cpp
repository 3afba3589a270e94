// Binary cross entropy (on probabilities) and its fused, autocast-safe form on logits: the front
// ends; the kernels are the backend's binary_cross_entropy (backend.h), whose one loop is the ref
// backend's (src/backend/ref/ref_bce.cpp).
#include "mixp/backend/backend.h"
#include "ops/dispatch.h"

namespace mixp {
using namespace detail;

namespace {

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
  Tensor loss = Tensor::empty(Shape{}, {.dtype = c, .device = xc.device()});
  backend_for(loss, xc, tc).binary_cross_entropy(loss, xc, tc, logits);
  Tensor out = finish(loss, rd);
  if (should_record({&x, &t})) {
    Tensor sx = xc.detach(), st = tc.detach();
    record(id, c, {&x, &t}, {&out}, [sx, st, logits](BackwardContext& ctx) {
      const Tensor g = raw_contiguous(as_compute(ctx.grad(), sx.dtype()));
      const TensorOptions o{.dtype = sx.dtype(), .device = sx.device()};
      Tensor gx = ctx.needs(0) ? Tensor::empty(sx.shape(), o) : Tensor();
      Tensor gt = ctx.needs(1) ? Tensor::empty(st.shape(), o) : Tensor();
      backend_for(g, sx, st).binary_cross_entropy_backward(gx, gt, g, sx, st, logits);
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
