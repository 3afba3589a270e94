// GEMM-like ops: matmul, bmm, linear (with fused bias + activation), conv2d, conv1d, fused
// attention and the LSTM cell. Backward passes reuse the backend's matmul with transposed strided
// views, so no transpose is ever materialized.
#include <cmath>
#include <optional>

#include "backend/narrow.h"
#include "mixp/ops/deferred_weight_grad.h"
#include "mixp/ops/matmul_precision.h"
#include "ops/dispatch.h"

namespace mixp {
using namespace detail;

namespace {
// How the GEMMs of one op run, decided at forward time and reused by its backward GEMMs.
//   c        the dtype products are computed in: fp64 when an input is fp64; bf16 / fp16 when every
//            input has that dtype (bf16 native on oneDNN, fp16 emulated exactly; fp32 accumulation,
//            result in that dtype, PyTorch's autocast semantics); else fp32.
//   mode     for c == fp32: TF32 or bf16 rounding of the operands (mixp/ops/matmul_precision.h).
struct GemmPlan {
  DType c = DType::fp32;
  Fp32GemmMode mode;
};

GemmPlan plan_gemm(std::initializer_list<const Tensor*> inputs) {
  const DType rd = result_dtype(inputs);
  if (kern::is_narrow(rd)) return GemmPlan{rd, {}};
  GemmPlan p{compute_of(rd), {}};
  if (p.c == DType::fp32) p.mode = effective_fp32_gemm_mode();
  return p;
}

// An fp32 GEMM operand rounded as the plan says (a same-layout copy), or t itself.
Tensor plan_operand(const Tensor& t, const GemmPlan& p) {
  if (p.c != DType::fp32 || !t.defined() || t.dtype() != DType::fp32) return t;
  switch (p.mode.precision) {
    case MatmulPrecision::highest:
      return t;
    case MatmulPrecision::high:
      return kern::convert_view(backend_for(t), t, DType::tf32, p.mode.round, DType::fp32);
    case MatmulPrecision::medium:
      return kern::convert_view(backend_for(t), t, DType::bf16, Round::nearest_even);
  }
  return t;
}

// The compute dtype the backend sees: bf16 for fp32 GEMMs at precision medium.
DType backend_compute(const GemmPlan& p) {
  return p.c == DType::fp32 && p.mode.precision == MatmulPrecision::medium ? DType::bf16 : p.c;
}

// The dtype of a GEMM's result: the 16-bit compute dtype, else fp32/fp64.
DType gemm_out_dtype(const GemmPlan& p) {
  return p.c;
}

// t^T over its last two dims, as a strided view (not recorded).
Tensor raw_t(const Tensor& t) {
  Shape sh = t.shape(), st = t.strides();
  const int n = t.dim();
  std::swap(sh[n - 1], sh[n - 2]);
  std::swap(st[n - 1], st[n - 2]);
  return raw_view(t, sh, st, t.storage_offset());
}

// [..., M, K] -> [R, K] (a view when possible).
Tensor rows_of(const Tensor& t) {
  if (t.dim() == 2) return t;
  const int64_t k = t.shape()[t.dim() - 1];
  return raw_reshape(t, Shape{k ? t.numel() / k : 0, k});
}

Tensor gemm(const Tensor& a, const Tensor& b, const Tensor& bias, const GemmPlan& plan,
            Activation act = Activation::none, std::optional<DType> out_dtype = std::nullopt) {
  Shape out_shape =
      a.dim() == 3 || b.dim() == 3
          ? Shape{std::max(a.dim() == 3 ? a.shape()[0] : 1, b.dim() == 3 ? b.shape()[0] : 1),
                  a.shape()[a.dim() - 2], b.shape()[b.dim() - 1]}
          : Shape{a.shape()[0], b.shape()[1]};
  Tensor dst = new_tensor(out_shape, out_dtype ? *out_dtype : gemm_out_dtype(plan),
                          common_device({&a, &b, &bias}));
  MatmulConfig cfg;
  cfg.compute = backend_compute(plan);
  cfg.tf32 = plan.c == DType::fp32 && plan.mode.precision == MatmulPrecision::high;
  cfg.activation = act;
  backend_for(dst, bias).matmul(dst, plan_operand(a, plan), plan_operand(b, plan), bias, cfg);
  return dst;
}

// Whether w is the bf16 cast of an fp32 leaf (autocast's weight copy; Tensor::to marks its node
// pass_grad_dtype). Its gradient then goes to the fp32 leaf and nowhere else, so the GEMM can
// write it in fp32 directly (bf16 x bf16 products accumulated in fp32, as every bf16 GEMM does)
// instead of rounding it to bf16 for the leaf to widen again: one rounding and two passes fewer.
// What TransformerEngine and Megatron do with fp32 "main_grad" accumulation; PyTorch's autocast
// rounds the weight gradient to bf16 first (docs/amp.md).
bool weight_grad_in_fp32(const Tensor& w) {
  if (w.dtype() != DType::bf16 || !w.requires_grad() || !w.grad_fn()) return false;
  const auto* n = dynamic_cast<const FunctionNode*>(w.grad_fn().get());
  return n && n->op() == OpId::to && n->pass_grad_dtype;
}

// dbias = sum of g over rows.
Tensor bias_grad(const Tensor& g2) {
  return sum(g2, Shape{0}, false);
}
}  // namespace

Tensor matmul(const Tensor& a0, const Tensor& b0) {
  check_float(a0, "matmul", "a");
  check_float(b0, "matmul", "b");
  if (a0.dim() == 3 && b0.dim() == 3) return bmm(a0, b0);
  Tensor in[2] = {a0, b0};
  apply_cast_policy(OpId::matmul, in);
  const Tensor& a = in[0];
  const Tensor& b = in[1];
  if (a.dim() < 2 || b.dim() != 2) {
    shape_error("matmul", "expected a [..., M, K] and b [K, N] (or two [B, M, K] x [B, K, N])",
                a.shape(), b.shape());
  }
  if (a.shape()[a.dim() - 1] != b.shape()[0])
    shape_error("matmul", "inner dimensions differ", a.shape(), b.shape());
  const DType rd = result_dtype({&a, &b});
  check_strict_dtypes(OpId::matmul, {&a, &b}, {"a", "b"});
  const GemmPlan plan = plan_gemm({&a, &b});
  const DType c = plan.c;
  const Tensor ac = as_compute(a, c), bc = as_compute(b, c);
  const Tensor a2 = rows_of(ac);
  Tensor y2 = gemm(a2, bc, Tensor(), plan);
  Shape out_shape = a.shape();
  out_shape[out_shape.size() - 1] = b.shape()[1];
  Tensor out =
      finish(raw_view(y2, out_shape, contiguous_strides(out_shape), y2.storage_offset()), rd);
  if (should_record({&a, &b})) {
    Tensor keep_a = b.requires_grad() ? a2.detach() : Tensor();
    Tensor keep_b = a.requires_grad() ? bc.detach() : Tensor();
    const Shape a_shape = a.shape();
    record(OpId::matmul, c, {&a, &b}, {&out},
           [keep_a, keep_b, a_shape, plan](BackwardContext& ctx) {
             const Tensor g2 = rows_of(raw_contiguous(ctx.grad()));
             if (ctx.needs(0))
               ctx.grad_inputs[0] = raw_reshape(gemm(g2, raw_t(keep_b), Tensor(), plan), a_shape);
             if (ctx.needs(1)) ctx.grad_inputs[1] = gemm(raw_t(keep_a), g2, Tensor(), plan);
           });
  }
  return out;
}

Tensor bmm(const Tensor& a0, const Tensor& b0) {
  check_float(a0, "bmm", "a");
  check_float(b0, "bmm", "b");
  Tensor in[2] = {a0, b0};
  apply_cast_policy(OpId::bmm, in);
  const Tensor& a = in[0];
  const Tensor& b = in[1];
  if (a.dim() != 3 || b.dim() != 3)
    shape_error("bmm", "expected [B, M, K] and [B, K, N]", a.shape(), b.shape());
  if (a.shape()[0] != b.shape()[0]) shape_error("bmm", "batch sizes differ", a.shape(), b.shape());
  if (a.shape()[2] != b.shape()[1])
    shape_error("bmm", "inner dimensions differ", a.shape(), b.shape());
  const DType rd = result_dtype({&a, &b});
  check_strict_dtypes(OpId::bmm, {&a, &b}, {"a", "b"});
  const GemmPlan plan = plan_gemm({&a, &b});
  const DType c = plan.c;
  const Tensor ac = as_compute(a, c), bc = as_compute(b, c);
  Tensor out = finish(gemm(ac, bc, Tensor(), plan), rd);
  if (should_record({&a, &b})) {
    Tensor keep_a = b.requires_grad() ? ac.detach() : Tensor();
    Tensor keep_b = a.requires_grad() ? bc.detach() : Tensor();
    record(OpId::bmm, c, {&a, &b}, {&out}, [keep_a, keep_b, plan](BackwardContext& ctx) {
      const Tensor g = raw_contiguous(ctx.grad());
      if (ctx.needs(0)) ctx.grad_inputs[0] = gemm(g, raw_t(keep_b), Tensor(), plan);
      if (ctx.needs(1)) ctx.grad_inputs[1] = gemm(raw_t(keep_a), g, Tensor(), plan);
    });
  }
  return out;
}

Tensor linear(const Tensor& x0, const Tensor& w0, const Tensor& b0, Activation act) {
  check_float(x0, "linear", "x");
  check_float(w0, "linear", "w");
  Tensor in[3] = {x0, w0, b0};
  apply_cast_policy(OpId::linear, in);
  const Tensor& x = in[0];
  const Tensor& w = in[1];
  const Tensor& b = in[2];
  if (w.dim() != 2 || x.dim() < 1 || x.shape()[x.dim() - 1] != w.shape()[1]) {
    shape_error("linear", "expected x [..., in] and w [out, in]", x.shape(), w.shape());
  }
  if (b.defined() && (b.dim() != 1 || b.shape()[0] != w.shape()[0]))
    shape_error("linear", "bias must be [out]", w.shape(), b.shape());
  const bool rec = should_record({&x, &w, &b});
  // gelu's backward needs the pre-activation, which a fused epilogue does not keep.
  if (act == Activation::gelu && rec)
    return gelu(linear(x, w, b, Activation::none), GeluApprox::tanh);
  const DType rd = result_dtype({&x, &w, &b});
  check_strict_dtypes(OpId::linear, {&x, &w, &b}, {"x", "w", "b"});
  const GemmPlan plan = plan_gemm({&x, &w, &b});
  const DType c = plan.c;
  const Tensor xc = as_compute(x, c), wc = as_compute(w, c), bc = as_compute(b, c);
  const Tensor x2 = x.dim() == 1 ? raw_reshape(xc, Shape{1, xc.shape()[0]}) : rows_of(xc);
  Tensor y2 = gemm(x2, raw_t(wc), bc, plan, act);
  Shape out_shape = x.shape();
  out_shape[out_shape.size() - 1] = w.shape()[0];
  Tensor out =
      finish(raw_view(y2, out_shape, contiguous_strides(out_shape), y2.storage_offset()), rd);
  if (rec) {
    Tensor keep_x = w.requires_grad() ? x2.detach() : Tensor();
    Tensor keep_w = x.requires_grad() ? wc.detach() : Tensor();
    Tensor keep_y = act == Activation::relu ? y2.detach() : Tensor();
    const Shape x_shape = x.shape();
    const bool dw32 = weight_grad_in_fp32(w);
    // A deferred weight gradient (ops/deferred_weight_grad.h): w0 is the caller's weight (a
    // module's parameter), before the cast policy.
    std::shared_ptr<DeferredWeightGrad> defer =
        w.requires_grad() ? deferred_weight_grad_for(w0) : nullptr;
    record(OpId::linear, c, {&x, &w, &b}, {&out},
           [keep_x, keep_w, keep_y, x_shape, plan, dw32, defer](BackwardContext& ctx) mutable {
             Tensor g2 = rows_of(raw_contiguous(ctx.grad()));
             if (keep_y.defined()) {
               Tensor gz = new_tensor(g2.shape(), g2.dtype(), g2.device());
               backend_for(gz, g2, keep_y).unary_backward(UnaryOp::relu, gz, g2, Tensor(), keep_y);
               g2 = gz;
               if (ctx.last_use()) keep_y = Tensor();
             }
             // dW before dX: the saved input is then dropped before dX (its shape) is allocated,
             // and the allocator serves dX from its block. In a transformer's MLP the second
             // linear's input is the widest activation, and this is where a step peaks.
             // The other way round when the saved weight is a cast copy that only this node
             // holds and it is larger than the saved input: the tied [vocab, C] head under
             // autocast without weight shadows (checkpointing), whose 16-bit copy is then freed
             // before its fp32 dW is allocated. The two GEMMs are independent: the same values
             // in either order.
             const bool dx_first = ctx.last_use() && ctx.needs(0) && keep_w.defined() &&
                                   keep_w.storage().use_count() == 1 &&
                                   keep_w.nbytes() > (keep_x.defined() ? keep_x.nbytes() : 0);
             auto dx = [&] {
               ctx.grad_inputs[0] = raw_reshape(gemm(g2, keep_w, Tensor(), plan), x_shape);
             };
             if (dx_first) {
               dx();
               keep_w = Tensor();
             }
             if (ctx.needs(1)) {
               auto dw = [g2, keep_x, plan, dw32] {
                 return gemm(raw_t(g2), keep_x, Tensor(), plan, Activation::none,
                             dw32 ? std::optional<DType>(DType::fp32) : std::nullopt);
               };
               if (defer) {
                 defer->stash(std::move(dw));  // w gets no gradient from this node now
               } else {
                 ctx.grad_inputs[1] = dw();
               }
             }
             if (ctx.last_use()) keep_x = Tensor();
             if (ctx.needs(0) && !dx_first) dx();
             if (ctx.needs(2)) ctx.grad_inputs[2] = bias_grad(g2);
           });
    if (dw32) static_cast<FunctionNode*>(out.grad_fn().get())->input_dtypes[1] = DType::fp32;
  }
  return out;
}

Tensor conv2d(const Tensor& x0, const Tensor& w0, const Tensor& b0, const Conv2dParams& p0) {
  check_float(x0, "conv2d", "x");
  check_float(w0, "conv2d", "w");
  Tensor in[3] = {x0, w0, b0};
  apply_cast_policy(OpId::conv2d, in);
  const Tensor& x = in[0];
  const Tensor& w = in[1];
  const Tensor& b = in[2];
  if (x.dim() != 4 || w.dim() != 4)
    shape_error("conv2d", "expected x [N, C, H, W] and w [O, C, KH, KW]", x.shape(), w.shape());
  if (x.shape()[1] != w.shape()[1])
    shape_error("conv2d", "input channels differ (groups are not supported)", x.shape(), w.shape());
  if (b.defined() && (b.dim() != 1 || b.shape()[0] != w.shape()[0]))
    shape_error("conv2d", "bias must be [O]", w.shape(), b.shape());
  if (p0.stride_h < 1 || p0.stride_w < 1 || p0.dilation_h < 1 || p0.dilation_w < 1 ||
      p0.pad_h < 0 || p0.pad_w < 0) {
    throw std::invalid_argument(
        "mixp::conv2d: strides and dilations must be >= 1 and padding >= 0");
  }
  const int64_t OH =
      (x.shape()[2] + 2 * p0.pad_h - p0.dilation_h * (w.shape()[2] - 1) - 1) / p0.stride_h + 1;
  const int64_t OW =
      (x.shape()[3] + 2 * p0.pad_w - p0.dilation_w * (w.shape()[3] - 1) - 1) / p0.stride_w + 1;
  if (OH <= 0 || OW <= 0)
    shape_error("conv2d", "the kernel is larger than the padded input", x.shape(), w.shape());
  const DType rd = result_dtype({&x, &w, &b});
  check_strict_dtypes(OpId::conv2d, {&x, &w, &b}, {"x", "w", "b"});
  const GemmPlan plan = plan_gemm({&x, &w, &b});
  const DType c = plan.c;
  Conv2dParams p = p0;
  p.compute = backend_compute(plan);
  const Tensor xc = raw_contiguous(as_compute(x, c)), wc = raw_contiguous(as_compute(w, c)),
               bc = as_compute(b, c);
  Tensor y = new_tensor(Shape{x.shape()[0], w.shape()[0], OH, OW}, c, x.device());
  backend_for(y).conv2d(y, plan_operand(xc, plan), plan_operand(wc, plan),
                        bc.defined() ? raw_contiguous(bc) : bc, p);
  Tensor out = finish(y, rd);
  if (should_record({&x, &w, &b})) {
    Tensor keep_x = w.requires_grad() ? xc.detach() : Tensor();
    Tensor keep_w = x.requires_grad() ? wc.detach() : Tensor();
    const Shape x_shape = x.shape(), w_shape = w.shape();
    record(OpId::conv2d, c, {&x, &w, &b}, {&out},
           [keep_x, keep_w, x_shape, w_shape, p, plan](BackwardContext& ctx) {
             const Tensor g = raw_contiguous(ctx.grad());
             const Tensor gp = plan_operand(g, plan);
             // Gradients in g's dtype (fp32 at precision medium, where the operands are
             // bf16-rounded).
             if (ctx.needs(0)) {
               Tensor gx = new_tensor(x_shape, g.dtype(), g.device());
               backend_for(gx, gp).conv2d_backward_data(gx, gp, plan_operand(keep_w, plan), p);
               ctx.grad_inputs[0] = gx;
             }
             if (ctx.needs(1) || ctx.needs(2)) {
               if (ctx.needs(1)) {
                 Tensor gw = new_tensor(w_shape, g.dtype(), g.device());
                 Tensor gb =
                     ctx.needs(2) ? new_tensor(Shape{w_shape[0]}, g.dtype(), g.device()) : Tensor();
                 backend_for(gw, gb, gp)
                     .conv2d_backward_weights(gw, gb, gp, plan_operand(keep_x, plan), p);
                 ctx.grad_inputs[1] = gw;
                 if (gb.defined()) ctx.grad_inputs[2] = gb;
               } else {
                 ctx.grad_inputs[2] = sum(g, Shape{0, 2, 3}, false);
               }
             }
           });
  }
  return out;
}

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride, int64_t padding) {
  Conv2dParams p;
  p.stride_h = p.stride_w = stride;
  p.pad_h = p.pad_w = padding;
  return conv2d(x, w, b, p);
}

// conv2d on [N, C, 1, L] and [O, C, 1, K]: oneDNN's kernels, conv2d's backward (through the
// unsqueeze views) and its 16-bit paths. The autocast policy is applied here under conv1d's own
// id, so the weight is cast once (weight shadows see the parameter itself); conv2d's hook then
// finds its inputs already cast.
Tensor conv1d(const Tensor& x0, const Tensor& w0, const Tensor& b0, int64_t stride, int64_t padding,
              int64_t dilation) {
  check_float(x0, "conv1d", "x");
  check_float(w0, "conv1d", "w");
  Tensor in[3] = {x0, w0, b0};
  apply_cast_policy(OpId::conv1d, in);
  const Tensor& x = in[0];
  const Tensor& w = in[1];
  const Tensor& b = in[2];
  if (x.dim() != 3 || w.dim() != 3)
    shape_error("conv1d", "expected x [N, C, L] and w [O, C, K]", x.shape(), w.shape());
  if (x.shape()[1] != w.shape()[1])
    shape_error("conv1d", "input channels differ (groups are not supported)", x.shape(), w.shape());
  if (b.defined() && (b.dim() != 1 || b.shape()[0] != w.shape()[0]))
    shape_error("conv1d", "bias must be [O]", w.shape(), b.shape());
  if (stride < 1 || dilation < 1 || padding < 0) {
    throw std::invalid_argument(fmt::format(
        "mixp::conv1d: stride and dilation must be >= 1 and padding >= 0, got stride={} "
        "padding={} dilation={}",
        stride, padding, dilation));
  }
  if (x.shape()[2] + 2 * padding - dilation * (w.shape()[2] - 1) - 1 < 0)
    shape_error("conv1d", "the kernel is larger than the padded input", x.shape(), w.shape());
  check_strict_dtypes(OpId::conv1d, {&x, &w, &b}, {"x", "w", "b"});
  Conv2dParams p;
  p.stride_w = stride;
  p.pad_w = padding;
  p.dilation_w = dilation;
  return conv2d(x.unsqueeze(2), w.unsqueeze(2), b, p).squeeze(2);
}

Tensor scaled_dot_product_attention(const Tensor& q0, const Tensor& k0, const Tensor& v0,
                                    bool causal, double scale) {
  check_float(q0, "attention", "q");
  check_float(k0, "attention", "k");
  check_float(v0, "attention", "v");
  Tensor in[3] = {q0, k0, v0};
  apply_cast_policy(OpId::attention, in);
  const Tensor& q = in[0];
  const Tensor& k = in[1];
  const Tensor& v = in[2];
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4)
    shape_error("attention", "q, k, v must be [B, H, T, D]", q.shape(), k.shape());
  if (k.shape() != v.shape())
    shape_error("attention", "k and v must have the same shape", k.shape(), v.shape());
  if (q.shape()[0] != k.shape()[0] || q.shape()[1] != k.shape()[1] ||
      q.shape()[3] != k.shape()[3]) {
    shape_error("attention", "q and k differ in batch, heads or head size", q.shape(), k.shape());
  }
  if (causal && q.shape()[2] > k.shape()[2])
    shape_error("attention", "causal attention needs Tq <= Tk", q.shape(), k.shape());
  if (scale == 0.0) scale = 1.0 / std::sqrt(static_cast<double>(q.shape()[3]));
  const DType rd = result_dtype({&q, &k, &v});
  check_strict_dtypes(OpId::attention, {&q, &k, &v}, {"q", "k", "v"});
  const GemmPlan plan = plan_gemm({&q, &k, &v});
  const DType c = plan.c;
  // TF32 / bf16 precision of fp32 attention rounds q, k, v (the rounded copies are what is saved).
  auto operand = [&](const Tensor& t) {
    return raw_contiguous(plan_operand(raw_contiguous(as_compute(t, c)), plan));
  };
  const Tensor qc = operand(q), kc = operand(k), vc = operand(v);
  Tensor y = new_tensor(q.shape(), c, q.device());
  Tensor lse = new_tensor(Shape{q.shape()[0], q.shape()[1], q.shape()[2]},
                          kern::is_narrow(c) ? DType::fp32 : c, q.device());
  backend_for(y, lse, qc, kc, vc).attention(y, lse, qc, kc, vc, causal, scale);
  Tensor out = finish(y, rd);
  if (should_record({&q, &k, &v})) {
    Tensor sq = qc.detach(), sk = kc.detach(), sv = vc.detach(), sy = y.detach(), sl = lse.detach();
    record(OpId::attention, c, {&q, &k, &v}, {&out},
           [sq, sk, sv, sy, sl, causal, scale](BackwardContext& ctx) {
             const Tensor g = raw_contiguous(ctx.grad());
             Tensor dq = new_tensor(sq.shape(), g.dtype(), g.device()),
                    dk = new_tensor(sk.shape(), g.dtype(), g.device()),
                    dv = new_tensor(sv.shape(), g.dtype(), g.device());
             backend_for(dq, dk, dv, g, sq, sk, sv, sy, sl)
                 .attention_backward(dq, dk, dv, g, sq, sk, sv, sy, sl, causal, scale);
             ctx.grad_inputs[0] = dq;
             ctx.grad_inputs[1] = dk;
             ctx.grad_inputs[2] = dv;
           });
  }
  return out;
}

Tensor attention_packed_qkv(const Tensor& qkv0, int64_t heads, bool causal, double scale) {
  check_float(qkv0, "attention", "qkv");
  Tensor in[1] = {qkv0};
  apply_cast_policy(OpId::attention, in);
  const Tensor& qkv = in[0];
  if (qkv.dim() != 3 || heads <= 0 || qkv.shape()[2] % (3 * heads) != 0) {
    shape_error("attention", "qkv must be [B, T, 3C] with C a multiple of the heads", qkv.shape(),
                Shape{heads});
  }
  const int64_t B = qkv.shape()[0], T = qkv.shape()[1], C = qkv.shape()[2] / 3, H = heads,
                D = C / H;
  if (scale == 0.0) scale = 1.0 / std::sqrt(static_cast<double>(D));
  const DType rd = result_dtype({&qkv});
  const GemmPlan plan = plan_gemm({&qkv});
  const DType c = plan.c;
  // The GEMM operand, rounded as the plan says (TF32 / bf16 precision of fp32 attention): what
  // is saved, as the three rounded copies of the split would be.
  const Tensor qc = raw_contiguous(plan_operand(raw_contiguous(as_compute(qkv, c)), plan));
  // Columns [col, col + C) of a contiguous [B, T, W] tensor as [B, H, T, D] heads (a view).
  auto heads_of = [B, T, H, D](const Tensor& t, int64_t col) {
    const int64_t W = t.shape()[2];
    return raw_view(t, Shape{B, H, T, D}, Shape{T * W, D, W, 1}, t.storage_offset() + col);
  };
  Tensor y = new_tensor(Shape{B, T, C}, c, qkv.device());
  Tensor lse = new_tensor(Shape{B, H, T}, kern::is_narrow(c) ? DType::fp32 : c, qkv.device());
  Backend& be = backend_for(y, lse, qc);
  // A backend that takes strided heads reads q, k, v in qc and writes y in place; another gets
  // the contiguous copies the split and the merge make.
  const bool strided = be.attention_strided();
  auto operand = [&](const Tensor& t) { return strided ? t : raw_contiguous(t); };
  const Tensor sq = operand(heads_of(qc, 0)), sk = operand(heads_of(qc, C)),
               sv = operand(heads_of(qc, 2 * C));
  Tensor y4 = heads_of(y, 0);
  if (strided) {
    be.attention(y4, lse, sq, sk, sv, causal, scale);
  } else {
    Tensor yc = new_tensor(y4.shape(), c, qkv.device());
    be.attention(yc, lse, sq, sk, sv, causal, scale);
    be.copy(y4, yc);
    y4 = yc;  // saved for backward in the layout the kernel takes
  }
  Tensor out = finish(y, rd);
  if (should_record({&qkv})) {
    Tensor sy = y4.detach(), sl = lse.detach();
    record(OpId::attention, c, {&qkv}, {&out},
           [sq, sk, sv, sy, sl, causal, scale, heads_of, C, strided](BackwardContext& ctx) {
             const Tensor g = raw_contiguous(ctx.grad());
             Tensor dqkv = new_tensor(Shape{g.shape()[0], g.shape()[1], 3 * C}, g.dtype(),
                                      g.device());
             Tensor dq = heads_of(dqkv, 0), dk = heads_of(dqkv, C), dv = heads_of(dqkv, 2 * C);
             Backend& bb = backend_for(dqkv, g, sq, sy, sl);
             if (strided) {
               bb.attention_backward(dq, dk, dv, heads_of(g, 0), sq, sk, sv, sy, sl, causal,
                                     scale);
             } else {
               Tensor a = new_tensor(dq.shape(), g.dtype(), g.device()),
                      b = new_tensor(dk.shape(), g.dtype(), g.device()),
                      d = new_tensor(dv.shape(), g.dtype(), g.device());
               bb.attention_backward(a, b, d, raw_contiguous(heads_of(g, 0)), sq, sk, sv, sy, sl,
                                     causal, scale);
               bb.copy(dq, a);
               bb.copy(dk, b);
               bb.copy(dv, d);
             }
             ctx.grad_inputs[0] = dqkv;
           });
  }
  return out;
}

std::pair<Tensor, Tensor> lstm_cell(const Tensor& x0, const Tensor& h0, const Tensor& c0,
                                    const Tensor& w_ih0, const Tensor& w_hh0, const Tensor& b_ih0,
                                    const Tensor& b_hh0) {
  Tensor in[7] = {x0, h0, c0, w_ih0, w_hh0, b_ih0, b_hh0};
  apply_cast_policy(OpId::lstm_cell, in);
  const Tensor &x = in[0], &h = in[1], &c = in[2], &w_ih = in[3], &w_hh = in[4], &b_ih = in[5],
               &b_hh = in[6];
  check_float(x, "lstm_cell", "x");
  check_float(h, "lstm_cell", "h");
  check_float(c, "lstm_cell", "c");
  if (h.dim() != 2 || c.shape() != h.shape())
    shape_error("lstm_cell", "h and c must both be [N, H]", h.shape(), c.shape());
  const int64_t H = h.shape()[1];
  if (w_ih.dim() != 2 || w_ih.shape()[0] != 4 * H)
    shape_error("lstm_cell", "w_ih must be [4H, I]", w_ih.shape(), h.shape());
  if (w_hh.dim() != 2 || w_hh.shape()[0] != 4 * H || w_hh.shape()[1] != H)
    shape_error("lstm_cell", "w_hh must be [4H, H]", w_hh.shape(), h.shape());
  // Composed from recorded ops (each has its own gradient), PyTorch gate order i, f, g, o.
  const Tensor gates = add(linear(x, w_ih, b_ih), linear(h, w_hh, b_hh));
  const std::vector<Tensor> q = chunk(gates, 4, 1);
  const Tensor i = sigmoid(q[0]), f = sigmoid(q[1]), g = tanh(q[2]), o = sigmoid(q[3]);
  const Tensor c_next = add(mul(f, c), mul(i, g));
  const Tensor h_next = mul(o, tanh(c_next));
  return {h_next, c_next};
}

}  // namespace mixp
