// Softmax, normalization, losses, pooling and embedding front ends.
#include "ops/dispatch.h"
#include "ops/layer_norm_saved.h"

namespace mixp {
using namespace detail;

namespace {
Tensor softmax_impl(OpId id, const Tensor& x0, int64_t dim0, bool log) {
  const char* nm = op_name(id).data();
  check_float(x0, nm, "x");
  Tensor in[1] = {x0};
  apply_cast_policy(id, in);
  const Tensor& x = in[0];
  const int dim = wrap_dim(dim0, x.dim(), nm);
  const DType rd = result_dtype({&x});
  const DType c = compute_of(rd);
  const Tensor xc = as_compute(x, c);
  Tensor y = new_tensor(x.shape(), c, x.device());
  if (x.dim() == 0) {
    backend_for(y).fill(y, log ? 0.0 : 1.0);
  } else {
    backend_for(y, xc).softmax(y, xc, dim, log);
  }
  Tensor out = finish(y, rd);
  if (should_record({&x})) {
    Tensor keep_y = y.detach();
    record(id, c, {&x}, {&out}, [keep_y, dim, log](BackwardContext& ctx) {
      const Tensor& g = ctx.grad();
      Tensor gi = new_tensor(g.shape(), g.dtype(), g.device());
      if (keep_y.dim() == 0)
        backend_for(gi).fill(gi, 0.0);
      else
        backend_for(gi, g, keep_y).softmax_backward(gi, g, keep_y, dim, log);
      ctx.grad_inputs[0] = gi;
    });
  }
  return out;
}
}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  return softmax_impl(OpId::softmax, x, dim, false);
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  return softmax_impl(OpId::log_softmax, x, dim, true);
}

Tensor layer_norm(const Tensor& x0, const Shape& normalized_shape, const Tensor& w0,
                  const Tensor& b0, double eps) {
  check_float(x0, "layer_norm", "x");
  Tensor in[3] = {x0, w0, b0};
  apply_cast_policy(OpId::layer_norm, in);
  const Tensor &x = in[0], &w = in[1], &b = in[2];
  const int k = normalized_shape.size();
  if (k == 0 || k > x.dim())
    shape_error("layer_norm", "normalized_shape must be trailing dims of x", x.shape(),
                normalized_shape);
  for (int i = 0; i < k; ++i) {
    if (x.shape()[x.dim() - k + i] != normalized_shape[i])
      shape_error("layer_norm", "normalized_shape must be trailing dims of x", x.shape(),
                  normalized_shape);
  }
  if (w.defined() && !(w.shape() == normalized_shape))
    shape_error("layer_norm", "weight must have normalized_shape", w.shape(), normalized_shape);
  if (b.defined() && !(b.shape() == normalized_shape))
    shape_error("layer_norm", "bias must have normalized_shape", b.shape(), normalized_shape);
  const int64_t n = normalized_shape.numel();
  const int64_t rows = n ? x.numel() / n : 0;
  const DType rd = result_dtype({&x, &w, &b});
  const DType c = compute_of(rd);
  const Tensor xc = raw_contiguous(as_compute(x, c));
  const Tensor wc = w.defined() ? raw_reshape(as_compute(w, c), Shape{n}) : Tensor();
  const Tensor bc = b.defined() ? raw_reshape(as_compute(b, c), Shape{n}) : Tensor();
  Tensor y = new_tensor(x.shape(), c, x.device());
  Tensor mean_t = new_tensor(Shape{rows}, c, x.device()),
         rstd_t = new_tensor(Shape{rows}, c, x.device());
  backend_for(y, mean_t, rstd_t, xc, wc, bc).layer_norm(y, mean_t, rstd_t, xc, wc, bc, eps);
  Tensor out = finish(y, rd);
  if (should_record({&x, &w, &b})) {
    // 16-bit saves under autocast (layer_norm_saved.h): xhat in the autocast dtype and rstd
    // instead of the fp32 input and mean.
    const DType save = saved_activation_dtype(OpId::layer_norm);
    const bool low =
        rd == DType::fp32 && c == DType::fp32 && (save == DType::bf16 || save == DType::fp16);
    Tensor sx = low ? layer_norm_xhat(xc, mean_t, rstd_t, save) : xc.detach();
    Tensor sw = wc.defined() ? wc.detach() : Tensor(), sm = low ? Tensor() : mean_t.detach(),
           sr = rstd_t.detach();
    const Shape ns = normalized_shape;
    record(OpId::layer_norm, c, {&x, &w, &b}, {&out},
           [sx, sw, sm, sr, ns, n, low](BackwardContext& ctx) {
             const Tensor g = raw_contiguous(ctx.grad());
             Tensor gx = new_tensor(sx.shape(), g.dtype(), g.device());
             Tensor gw = ctx.needs(1) ? new_tensor(Shape{n}, g.dtype(), g.device()) : Tensor();
             Tensor gb = ctx.needs(2) ? new_tensor(Shape{n}, g.dtype(), g.device()) : Tensor();
             if (low) {
               layer_norm_backward_from_xhat(gx, gw, gb, g, sx, sw, sr);
             } else {
               backend_for(gx, gw, gb, g, sx, sw, sm, sr)
                   .layer_norm_backward(gx, gw, gb, g, sx, sw, sm, sr);
             }
             ctx.grad_inputs[0] = gx;
             if (gw.defined()) ctx.grad_inputs[1] = raw_reshape(gw, ns);
             if (gb.defined()) ctx.grad_inputs[2] = raw_reshape(gb, ns);
           });
  }
  return out;
}

Tensor batch_norm(const Tensor& x0, Tensor running_mean, Tensor running_var, const Tensor& w0,
                  const Tensor& b0, bool training, double momentum, double eps) {
  check_float(x0, "batch_norm", "x");
  Tensor in[3] = {x0, w0, b0};
  apply_cast_policy(OpId::batch_norm, in);
  const Tensor &x = in[0], &w = in[1], &b = in[2];
  if (x.dim() < 2)
    throw std::invalid_argument("mixp::batch_norm: x must be [N, C] or [N, C, *], got " +
                                x.shape().str());
  const int64_t C = x.shape()[1];
  const Shape cs{C};
  for (const Tensor* t : {&w, &b, static_cast<const Tensor*>(&running_mean),
                          static_cast<const Tensor*>(&running_var)}) {
    if (t->defined() && !(t->shape() == cs))
      shape_error("batch_norm", "per-channel tensors must be [C]", x.shape(), t->shape());
  }
  if (!training && (!running_mean.defined() || !running_var.defined())) {
    throw std::invalid_argument("mixp::batch_norm: eval mode needs running_mean and running_var");
  }
  if (training && x.numel() / C <= 1) {
    throw std::invalid_argument(
        "mixp::batch_norm: training needs more than one value per channel, got " + x.shape().str());
  }
  const DType rd = result_dtype({&x, &w, &b});
  const DType c = compute_of(rd);
  const Tensor xc = raw_contiguous(as_compute(x, c));
  const Tensor wc = as_compute(w, c), bc = as_compute(b, c);
  // Running stats are updated in place; work on compute-dtype copies when they are stored narrower.
  Tensor rm = as_compute(running_mean, c), rv = as_compute(running_var, c);
  Tensor y = new_tensor(x.shape(), c, x.device());
  Tensor save_mean = new_tensor(cs, c, x.device()), save_invstd = new_tensor(cs, c, x.device());
  {
    NoGradGuard ng;
    backend_for(y, save_mean, save_invstd, rm, rv, xc, wc, bc)
        .batch_norm(y, save_mean, save_invstd, rm, rv, xc, wc, bc, training, momentum, eps);
    if (training) {
      if (running_mean.defined() && !rm.is_same(running_mean))
        backend_for(running_mean, rm).copy(running_mean, rm);
      if (running_var.defined() && !rv.is_same(running_var))
        backend_for(running_var, rv).copy(running_var, rv);
      // Written in place either way (by the kernel or the copy): a new version of each.
      if (running_mean.defined()) running_mean.bump_version();
      if (running_var.defined()) running_var.bump_version();
    }
  }
  Tensor out = finish(y, rd);
  if (should_record({&x, &w, &b})) {
    if (!training) {
      // Eval: y = (x - m) * invstd * w + b with constants m, invstd: a per-channel affine map.
      Tensor inv = new_tensor(cs, c, x.device());
      {
        Tensor tmp = add(as_compute(running_var, c).detach(), eps);
        backend_for(inv, tmp).unary(UnaryOp::sqrt, inv, tmp);
        backend_for(inv, inv).scalar(ScalarOp::rdiv, inv, inv, 1.0);
      }
      Tensor sx = xc.detach(), sw = wc.defined() ? wc.detach() : Tensor(),
             sm = as_compute(running_mean, c).detach();
      const int nd = x.dim();
      record(OpId::batch_norm, c, {&x, &w, &b}, {&out},
             [sx, sw, sm, inv, nd](BackwardContext& ctx) {
               const Tensor& g = ctx.grad();
               Shape bshape = Shape::filled(nd, 1);
               bshape[1] = inv.shape()[0];
               Shape red;
               for (int i = 0; i < nd; ++i)
                 if (i != 1) red.push_back(i);
               const Tensor invb = raw_reshape(inv, bshape);
               const Tensor scale = sw.defined() ? mul(invb, raw_reshape(sw, bshape)) : invb;
               if (ctx.needs(0)) ctx.grad_inputs[0] = mul(g, scale);
               if (ctx.needs(1)) {
                 const Tensor xhat = mul(sub(sx, raw_reshape(sm, bshape)), invb);
                 ctx.grad_inputs[1] = sum(mul(g, xhat), red, false);
               }
               if (ctx.needs(2)) ctx.grad_inputs[2] = sum(g, red, false);
             });
    } else {
      Tensor sx = xc.detach(), sw = wc.defined() ? wc.detach() : Tensor(), sm = save_mean.detach(),
             si = save_invstd.detach();
      record(OpId::batch_norm, c, {&x, &w, &b}, {&out}, [sx, sw, sm, si, cs](BackwardContext& ctx) {
        const Tensor g = raw_contiguous(ctx.grad());
        Tensor gx = new_tensor(sx.shape(), g.dtype(), g.device());
        Tensor gw = ctx.needs(1) ? new_tensor(cs, g.dtype(), g.device()) : Tensor();
        Tensor gb = ctx.needs(2) ? new_tensor(cs, g.dtype(), g.device()) : Tensor();
        backend_for(gx, gw, gb, g, sx, sw, sm, si)
            .batch_norm_backward(gx, gw, gb, g, sx, sw, sm, si);
        ctx.grad_inputs[0] = gx;
        if (gw.defined()) ctx.grad_inputs[1] = gw;
        if (gb.defined()) ctx.grad_inputs[2] = gb;
      });
    }
  }
  return out;
}

Tensor cross_entropy(const Tensor& logits0, const Tensor& targets) {
  check_float(logits0, "cross_entropy", "logits");
  check_defined(targets, "cross_entropy", "targets");
  Tensor in[1] = {logits0};
  apply_cast_policy(OpId::cross_entropy, in);
  const Tensor& logits = in[0];
  if (logits.dim() != 2)
    shape_error("cross_entropy", "logits must be [N, C]", logits.shape(), targets.shape());
  if (targets.dim() != 1 || targets.shape()[0] != logits.shape()[0]) {
    shape_error("cross_entropy", "targets must be [N] class indices", logits.shape(),
                targets.shape());
  }
  if (targets.dtype() != DType::int64 && targets.dtype() != DType::int32) {
    throw std::invalid_argument(
        "mixp::cross_entropy: targets must be int64 or int32 class indices, got " +
        std::string(name(targets.dtype())));
  }
  const DType rd = result_dtype({&logits});
  const DType c = compute_of(rd);
  const Tensor lc = as_compute(logits, c);
  Tensor loss = new_tensor(Shape{}, c, logits.device());
  Tensor lse = new_tensor(Shape{logits.shape()[0]}, c, logits.device());
  backend_for(loss, lse, lc, targets).cross_entropy(loss, lse, lc, targets);
  Tensor out = finish(loss, rd);
  if (should_record({&logits})) {
    Tensor sl = lc.detach(), st = targets.detach(), slse = lse.detach();
    record(OpId::cross_entropy, c, {&logits}, {&out}, [sl, st, slse](BackwardContext& ctx) {
      const Tensor& g = ctx.grad();
      Tensor gl = new_tensor(sl.shape(), g.dtype(), g.device());
      backend_for(gl, g, sl, st, slse).cross_entropy_backward(gl, g, sl, st, slse);
      ctx.grad_inputs[0] = gl;
    });
  }
  return out;
}

Tensor mse_loss(const Tensor& pred0, const Tensor& target0) {
  check_float(pred0, "mse_loss", "pred");
  check_float(target0, "mse_loss", "target");
  Tensor in[2] = {pred0, target0};
  apply_cast_policy(OpId::mse_loss, in);
  if (!(in[0].shape() == in[1].shape()))
    shape_error("mse_loss", "pred and target must have the same shape", in[0].shape(),
                in[1].shape());
  // Composed from recorded ops: mean((pred - target)^2).
  const Tensor d = sub(in[0], in[1]);
  return mean(mul(d, d));
}

namespace {
Pool2dParams pool_params(int64_t kernel, int64_t stride, int64_t padding) {
  Pool2dParams p;
  p.kernel_h = p.kernel_w = kernel;
  p.stride_h = p.stride_w = stride > 0 ? stride : kernel;
  p.pad_h = p.pad_w = padding;
  return p;
}

Tensor pool_impl(OpId id, const Tensor& x0, const Pool2dParams& p) {
  const char* nm = op_name(id).data();
  check_float(x0, nm, "x");
  Tensor in[1] = {x0};
  apply_cast_policy(id, in);
  const Tensor& x = in[0];
  if (x.dim() != 4)
    throw std::invalid_argument(
        fmt::format("mixp::{}: x must be [N, C, H, W], got {}", nm, x.shape().str()));
  if (p.kernel_h < 1 || p.kernel_w < 1 || p.stride_h < 1 || p.stride_w < 1 || p.pad_h < 0 ||
      p.pad_w < 0 || p.pad_h * 2 > p.kernel_h || p.pad_w * 2 > p.kernel_w) {
    throw std::invalid_argument(fmt::format(
        "mixp::{}: invalid kernel/stride/padding (padding must be at most half the kernel)", nm));
  }
  const int64_t OH = (x.shape()[2] + 2 * p.pad_h - p.kernel_h) / p.stride_h + 1;
  const int64_t OW = (x.shape()[3] + 2 * p.pad_w - p.kernel_w) / p.stride_w + 1;
  if (OH <= 0 || OW <= 0)
    throw std::invalid_argument(
        fmt::format("mixp::{}: kernel larger than the input {}", nm, x.shape().str()));
  const DType rd = result_dtype({&x});
  const DType c = compute_of(rd);
  const Tensor xc = as_compute(x, c);
  Tensor y = new_tensor(Shape{x.shape()[0], x.shape()[1], OH, OW}, c, x.device());
  const bool is_max = id == OpId::max_pool2d;
  if (is_max)
    backend_for(y, xc).max_pool2d(y, xc, p);
  else
    backend_for(y, xc).avg_pool2d(y, xc, p);
  Tensor out = finish(y, rd);
  if (should_record({&x})) {
    Tensor sx = is_max ? xc.detach() : Tensor();
    const Shape xs = x.shape();
    record(id, c, {&x}, {&out}, [sx, xs, p, is_max](BackwardContext& ctx) {
      const Tensor& g = ctx.grad();
      Tensor gi = new_tensor(xs, g.dtype(), g.device());
      if (is_max)
        backend_for(gi, g, sx).max_pool2d_backward(gi, g, sx, p);
      else
        backend_for(gi, g).avg_pool2d_backward(gi, g, p);
      ctx.grad_inputs[0] = gi;
    });
  }
  return out;
}
}  // namespace

Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  return pool_impl(OpId::max_pool2d, x, pool_params(kernel, stride, padding));
}
Tensor avg_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  return pool_impl(OpId::avg_pool2d, x, pool_params(kernel, stride, padding));
}
Tensor max_pool2d(const Tensor& x, const Pool2dParams& p) {
  return pool_impl(OpId::max_pool2d, x, p);
}
Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p) {
  return pool_impl(OpId::avg_pool2d, x, p);
}

Tensor embedding(const Tensor& indices, const Tensor& w0) {
  check_defined(indices, "embedding", "indices");
  check_float(w0, "embedding", "weight");
  Tensor in[1] = {w0};
  apply_cast_policy(OpId::embedding, in);
  const Tensor& w = in[0];
  if (w.dim() != 2) shape_error("embedding", "weight must be [V, E]", indices.shape(), w.shape());
  if (indices.dtype() != DType::int64 && indices.dtype() != DType::int32) {
    throw std::invalid_argument("mixp::embedding: indices must be int64 or int32, got " +
                                std::string(name(indices.dtype())));
  }
  const DType rd = result_dtype({&w});
  const DType c = compute_of(rd);
  const Tensor wc = as_compute(w, c);
  Shape out_shape = indices.shape();
  out_shape.push_back(w.shape()[1]);
  Tensor y = new_tensor(out_shape, c, common_device({&w, &indices}));
  backend_for(y, wc, indices).embedding(y, wc, indices);
  Tensor out = finish(y, rd);
  if (should_record({&w})) {
    Tensor si = indices.detach();
    const Shape ws = w.shape();
    // An fp32 weight's gradient goes as an addition (GradAdder): when a gradient for the weight
    // is already accumulating (a tied head's, or the leaf's earlier micro-batches'), the rows are
    // added into it in place, without the dense [V, E] buffer; the additions are the same
    // (embedding_backward_add's contract), so the result is bit for bit the dense one.
    const bool in_place = rd == c && c == DType::fp32;
    record(OpId::embedding, c, {&w}, {&out}, [si, ws, in_place](BackwardContext& ctx) {
      const Tensor g = ctx.grad();
      auto dense = [si, ws, g] {
        Tensor gw = zeros(ws, {.dtype = g.dtype(), .device = g.device()});
        backend_for(gw, g, si).embedding_backward(gw, g, si);
        return gw;
      };
      if (!in_place) {
        ctx.grad_inputs[0] = dense();
        return;
      }
      ctx.add_into(0, GradAdder{.add = [si, g](Tensor& dst) {
                                  backend_for(dst, g, si).embedding_backward_add(dst, g, si);
                                },
                                .make = dense});
    });
  }
  return out;
}

}  // namespace mixp
