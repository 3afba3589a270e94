// fp8_linear: the FP8 (per-tensor) and MXFP8 linear op (see fp8_linear.h).
#include "mixp/amp/fp8_linear.h"

#include <fmt/format.h>

#include "amp/fp8_detail.h"
#include "mixp/amp/fp8_quantize.h"
#include "mixp/backend/backend.h"
#include "mixp/backend/gemm.h"
#include "ops/dispatch.h"

namespace mixp::amp {

Fp8LinearMeta::Fp8LinearMeta(const Fp8Recipe& recipe) : recipe_(recipe) {
  recipe_.validate();
  if (recipe_.scaling != Fp8Scaling::delayed) return;
  for (Fp8Role role : kFp8Roles) {
    states_[static_cast<int>(role)] = std::make_shared<Fp8ScalingState>(
        recipe_.dtype(role), recipe_.amax_history_len, recipe_.amax_compute_algo, recipe_.margin);
  }
}

std::vector<std::pair<std::string, Tensor>> Fp8LinearMeta::buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (Fp8Role role : kFp8Roles) {
    if (!state(role)) continue;
    for (auto& [n, t] : state(role)->tensors())
      out.emplace_back(fmt::format("fp8_{}_{}", to_string(role), n), t);
  }
  return out;
}

namespace {

Fp8OperandObserver& operand_observer() {
  static Fp8OperandObserver o;
  return o;
}

// Hands a per-tensor cast's operand and scale to the observer, if one is set.
void observe(const Fp8LinearMeta& meta, Fp8Role role, const Tensor& t, float scale) {
  if (const Fp8OperandObserver& o = operand_observer()) o(meta, role, t, scale);
}

// Per-tensor quantization of `t` (fp32, contiguous) for `role` with the meta's scaling.
Fp8Quantized quantize_role(const Tensor& t, Fp8Role role, const Fp8LinearMeta& meta) {
  const Fp8Recipe& r = meta.recipe();
  const DType dt = r.dtype(role);
  if (r.scaling == Fp8Scaling::current) {
    Fp8Quantized q = fp8_quantize_current(t, dt, r.margin);
    observe(meta, role, t, q.scale);
    return q;
  }
  const std::shared_ptr<Fp8ScalingState>& s = meta.state_ptr(role);
  if (role != Fp8Role::grad_output && Fp8Autocast::is_recompute()) {
    // Activation recomputation: the scales the original forward used, nothing recorded.
    Fp8Quantized q = fp8_quantize(t, dt, s->previous_scale());
    q.scale_inv = s->previous_scale_inv();
    return q;
  }
  Fp8Quantized q = fp8_quantize(t, dt, s->scale());
  q.scale_inv = s->scale_inv();           // TE's stored scale_inv (1/scale, fp32)
  observe(meta, role, t, q.scale);
  if (!detail::records_amax()) return q;  // an evaluation pass
  s->record_amax(q.amax);
  if (role == Fp8Role::grad_output)
    detail::note_backward_state(s);
  else
    detail::note_forward_state(s);
  return q;
}

// dst (fp32 [M, N]) = a [M, K] @ b [K, N] on the bf16 path; empty K gives zeros.
Tensor gemm_f32(const Tensor& a, const Tensor& b) {
  Tensor dst = Tensor::empty(Shape{a.size(0), b.size(1)}, {.device = a.device()});
  gemm(dst, a, b);
  return dst;
}

// [..., C] -> [R, C], detached fp32 contiguous.
Tensor rows_f32(const Tensor& t, int64_t c) {
  Tensor f = mixp::detail::raw_contiguous(mixp::detail::as_compute(t.detach(), DType::fp32));
  return mixp::detail::raw_reshape(f, Shape{c ? f.numel() / c : 0, c});
}

}  // namespace

void set_fp8_operand_observer(Fp8OperandObserver observer) {
  operand_observer() = std::move(observer);
}

Tensor fp8_linear(const Tensor& x, const Tensor& w, const Tensor& b, Activation act,
                  Fp8LinearMeta& meta) {
  mixp::detail::check_float(x, "fp8_linear", "x");
  mixp::detail::check_float(w, "fp8_linear", "w");
  if (w.dim() != 2 || x.dim() < 1 || x.size(-1) != w.size(1)) {
    mixp::detail::shape_error("fp8_linear", "expected x [..., in] and w [out, in]", x.shape(),
                              w.shape());
  }
  if (b.defined() && (b.dim() != 1 || b.size(0) != w.size(0))) {
    mixp::detail::shape_error("fp8_linear", "bias must be [out]", w.shape(), b.shape());
  }
  // GELU's backward needs the pre-activation: applied as its own op.
  if (act == Activation::gelu)
    return gelu(fp8_linear(x, w, b, Activation::none, meta), GeluApprox::tanh);
  if (is_block_scaled(meta.recipe().scaling))
    return detail::block_scaled_linear(x, w, b, act, meta);

  const bool rec = mixp::detail::should_record({&x, &w, &b});
  const bool need_dx = rec && x.requires_grad();
  const bool need_dw = rec && w.requires_grad();
  const bool relu = act == Activation::relu;
  const int64_t K = w.size(1), N = w.size(0);
  const Fp8Recipe& recipe = meta.recipe();

  Tensor x2 = rows_f32(x, K), wf = rows_f32(w, K);
  Tensor bf = b.defined() ? rows_f32(b, N) : Tensor();
  const int64_t M = x2.size(0);

  Tensor y;
  // What backward keeps: the quantized operands for each backward GEMM and their scale_invs.
  Tensor keep_x, keep_w;
  float sinv_x = 1.0f, sinv_w = 1.0f;
  {
    NoGradGuard ng;
    if (recipe.scaling == Fp8Scaling::mxfp8) {
      const int blk = recipe.mx_block;
      const Tensor qx = mxfp8_rows(x2, recipe.dtype(Fp8Role::input), blk);
      const Tensor qw = mxfp8_rows(wf, recipe.dtype(Fp8Role::weight), blk);
      y = gemm_f32(qx, qw.t());
      // Column-wise copies for the backward GEMMs, quantized from the high-precision tensors
      // with the blocks along the dimension those GEMMs reduce over, in the tensors' own layout.
      if (need_dw) keep_x = mxfp8_column_blocks(x2, recipe.dtype(Fp8Role::input), blk);   // [M, K]
      if (need_dx) keep_w = mxfp8_column_blocks(wf, recipe.dtype(Fp8Role::weight), blk);  // [N, K]
    } else {
      const Fp8Quantized qx = quantize_role(x2, Fp8Role::input, meta);
      const Fp8Quantized qw = quantize_role(wf, Fp8Role::weight, meta);
      y = gemm_f32(qx.data, qw.data.t());
      sinv_x = qx.scale_inv;
      sinv_w = qw.scale_inv;
      if (need_dw) keep_x = qx.data;  // [M, K]
      if (need_dx) keep_w = qw.data;  // [N, K]
    }
    backend_for(y, bf).scale_bias_act(y, y, bf, sinv_x * sinv_w,
                                      relu ? Activation::relu : Activation::none);
  }
  Tensor out = detail::linear_output(y, x.shape(), N);
  if (!rec) return out;

  Tensor keep_y = relu ? y.detach() : Tensor();
  const Shape x_shape = x.shape();
  auto grad_state = meta.state_ptr(Fp8Role::grad_output);
  // For the operand observer only (the layer that owns the meta outlives its backward).
  const Fp8LinearMeta* meta_ptr = &meta;
  mixp::detail::record(
      OpId::linear, DType::fp32, {&x, &w, &b}, {&out},
      [keep_x, keep_w, keep_y, sinv_x, sinv_w, recipe, grad_state, meta_ptr, x_shape, M, N,
       K](BackwardContext& ctx) {
        Tensor g = detail::linear_output_grad(ctx.grad(), keep_y, M, N);
        // TE: the bias gradient comes from the high-precision gradient.
        if (ctx.needs(2)) ctx.grad_inputs[2] = sum(g, Shape{0}, false);
        if (!ctx.needs(0) && !ctx.needs(1)) return;
        const DType gdt = recipe.dtype(Fp8Role::grad_output);
        if (recipe.scaling == Fp8Scaling::mxfp8) {
          if (ctx.needs(0)) {  // dx [M, K] = g [M, N] @ w [N, K], blocks along N
            const Tensor qg = mxfp8_rows(g, gdt, recipe.mx_block);
            ctx.grad_inputs[0] = mixp::detail::raw_reshape(gemm_f32(qg, keep_w), x_shape);
          }
          if (ctx.needs(1)) {  // dw [N, K] = g^T [N, M] @ x [M, K], blocks along M
            const Tensor qgc = mxfp8_column_blocks(g, gdt, recipe.mx_block);  // [M, N]
            ctx.grad_inputs[1] = gemm_f32(qgc.t(), keep_x);
          }
          return;
        }
        Fp8Quantized qg;
        if (recipe.scaling == Fp8Scaling::current) {
          qg = fp8_quantize_current(g, gdt, recipe.margin);
        } else {
          qg = fp8_quantize(g, gdt, grad_state->scale());
          qg.scale_inv = grad_state->scale_inv();
          grad_state->record_amax(qg.amax);
          detail::note_backward_state(grad_state);
        }
        observe(*meta_ptr, Fp8Role::grad_output, g, qg.scale);
        if (ctx.needs(0)) {
          Tensor dx = gemm_f32(qg.data, keep_w);
          backend_for(dx).scale_bias_act(dx, dx, Tensor(), qg.scale_inv * sinv_w, Activation::none);
          ctx.grad_inputs[0] = mixp::detail::raw_reshape(dx, x_shape);
        }
        if (ctx.needs(1)) {
          Tensor dw = gemm_f32(qg.data.t(), keep_x);
          backend_for(dw).scale_bias_act(dw, dw, Tensor(), qg.scale_inv * sinv_x, Activation::none);
          ctx.grad_inputs[1] = dw;
        }
      });
  return out;
}

namespace detail {
Tensor linear_output(const Tensor& y, const Shape& x_shape, int64_t N) {
  Shape out_shape = x_shape;
  out_shape[out_shape.size() - 1] = N;
  return mixp::detail::raw_reshape(y, out_shape);
}

Tensor linear_output_grad(const Tensor& grad, const Tensor& keep_y, int64_t M, int64_t N) {
  Tensor g = mixp::detail::raw_reshape(mixp::detail::raw_contiguous(grad), Shape{M, N});
  if (!keep_y.defined()) return g;
  Tensor gz = Tensor::empty(g.shape(), {.device = g.device()});
  backend_for(gz, g, keep_y).mask_grad(gz, g, keep_y);
  return gz;
}
}  // namespace detail

}  // namespace mixp::amp
