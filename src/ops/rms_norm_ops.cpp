// Front ends of the LLaMA family's own ops (ops.h): rms_norm and rope. Both keep only what
// backward needs: rms_norm its fp32 input, weight and per-row rstd (as layer_norm keeps its input,
// mean and rstd: src/ops/nn_ops.cpp); rope nothing but the angle tables it was given.
#include <fmt/format.h>

#include "ops/dispatch.h"

namespace mixp {
using namespace detail;

Tensor rms_norm(const Tensor& x0, const Tensor& w0, double eps) {
  check_float(x0, "rms_norm", "x");
  Tensor in[2] = {x0, w0};
  apply_cast_policy(OpId::rms_norm, in);
  const Tensor &x = in[0], &w = in[1];
  if (x.dim() < 1) shape_error("rms_norm", "x must have at least one dim", x.shape(), Shape{});
  const int64_t n = x.size(-1);
  if (w.defined() && !(w.shape() == Shape{n}))
    shape_error("rms_norm", "weight must be [x.size(-1)]", w.shape(), x.shape());
  if (!(eps >= 0.0))
    throw std::invalid_argument(fmt::format("mixp::rms_norm: eps must be >= 0, got {}", eps));
  const int64_t rows = n ? x.numel() / n : 0;
  const DType rd = result_dtype({&x, &w});
  const DType c = compute_of(rd);
  const Tensor xc = raw_contiguous(as_compute(x, c));
  const Tensor wc = w.defined() ? raw_contiguous(as_compute(w, c)) : Tensor();
  Tensor y = new_tensor(x.shape(), c, x.device());
  Tensor rstd = new_tensor(Shape{rows}, c, x.device());
  if (rows > 0) backend_for(y, rstd, xc, wc).rms_norm(y, rstd, xc, wc, eps);
  Tensor out = finish(y, rd);
  if (should_record({&x, &w})) {
    Tensor sx = xc.detach(), sw = wc.defined() ? wc.detach() : Tensor(), sr = rstd.detach();
    record(OpId::rms_norm, c, {&x, &w}, {&out}, [sx, sw, sr, n, rows](BackwardContext& ctx) {
      const Tensor g = raw_contiguous(ctx.grad());
      Tensor gx = new_tensor(sx.shape(), g.dtype(), g.device());
      Tensor gw = ctx.needs(1) ? new_tensor(Shape{n}, g.dtype(), g.device()) : Tensor();
      if (rows > 0) {
        backend_for(gx, gw, g, sx, sw, sr).rms_norm_backward(gx, gw, g, sx, sw, sr);
      } else if (gw.defined()) {
        backend_for(gw).fill(gw, 0.0);
      }
      ctx.grad_inputs[0] = gx;
      if (gw.defined()) ctx.grad_inputs[1] = gw;
    });
  }
  return out;
}

Tensor rope(const Tensor& x0, const Tensor& cos, const Tensor& sin) {
  check_float(x0, "rope", "x");
  check_float(cos, "rope", "cos");
  check_float(sin, "rope", "sin");
  Tensor in[1] = {x0};
  apply_cast_policy(OpId::rope, in);
  const Tensor& x = in[0];
  if (x.dim() != 4 || x.size(3) % 2 != 0)
    shape_error("rope", "x must be [B, T, H, D] with D even", x.shape(), cos.shape());
  const int64_t T = x.size(1), h = x.size(3) / 2;
  if (cos.dim() != 2 || cos.size(0) < T || cos.size(1) != h || !(sin.shape() == cos.shape()))
    shape_error("rope", "cos and sin must be [>= T, D/2] for x [B, T, H, D]", x.shape(),
                cos.shape());
  const DType rd = result_dtype({&x});
  const DType c = compute_of(rd);
  const Tensor xc = raw_contiguous(as_compute(x, c));
  const Tensor cc = raw_contiguous(as_compute(cos.detach().slice(0, 0, T), c));
  const Tensor sc = raw_contiguous(as_compute(sin.detach().slice(0, 0, T), c));
  Tensor y = new_tensor(x.shape(), c, x.device());
  if (x.numel() > 0) backend_for(y, xc, cc, sc).rope(y, xc, cc, sc, /*inverse=*/false);
  Tensor out = finish(y, rd);
  if (should_record({&x})) {
    record(OpId::rope, c, {&x}, {&out}, [cc, sc](BackwardContext& ctx) {
      const Tensor g = raw_contiguous(ctx.grad());
      Tensor gx = new_tensor(g.shape(), g.dtype(), g.device());
      if (g.numel() > 0) backend_for(gx, g, cc, sc).rope(gx, g, cc, sc, /*inverse=*/true);
      ctx.grad_inputs[0] = gx;
    });
  }
  return out;
}

}  // namespace mixp
