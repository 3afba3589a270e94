// CudaBackend's cnn kernels: conv2d and its two gradients as GEMMs through cuBLASLt (im2col, then
// weight [O, C*KH*KW] x col [N, C*KH*KW, OH*OW] batched with the weight broadcast; the data
// gradient is W^T x dy then col2im; the weight gradient one GEMM over the N*OH*OW columns), max and
// avg pooling, batch norm, reduce_max_backward. cuDNN would be faster (docs/cuda.md); these need
// nothing beyond cuBLASLt. Kernels: cuda_nn.cu; element rules: math/nn_math.h.
#include <fmt/format.h>

#include <initializer_list>
#include <stdexcept>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_nn_kernels.h"

namespace mixp::cuda {

namespace {
Elem float_elem(const Tensor& t, const char* op) {
  const Elem e = elem_of(t.dtype(), op);
  if (e != Elem::f32 && e != Elem::bf16 && e != Elem::f16)
    unsupported(op, fmt::format("dtype {} (fp32, bf16 or fp16)", mixp::name(t.dtype())));
  return e;
}
void need_contiguous(const Tensor& t, const char* op, const char* what) {
  if (!t.is_contiguous()) unsupported(op, fmt::format("a strided {}", what));
}
// Batch norm's operands: fp32 and contiguous where given (an undefined tensor is an absent
// optional operand); a float pointer to each, null where absent; the [N, C, S] shape of x.
void need_fp32_contiguous(std::initializer_list<const Tensor*> ts, const char* op) {
  for (const Tensor* t : ts) {
    if (!t->defined()) continue;
    if (t->dtype() != DType::fp32)
      unsupported(op, fmt::format("dtype {} (fp32 only)", mixp::name(t->dtype())));
    need_contiguous(*t, op, "operand");
  }
}
float* f32_or_null(const Tensor& t) {
  return t.defined() ? static_cast<float*>(dev_ptr(t)) : nullptr;
}
void set_nchw(BatchNormArgs& a, const Tensor& x) {
  a.N = x.shape()[0];
  a.C = x.shape()[1];
  a.S = a.C && a.N ? x.numel() / (a.N * a.C) : 0;
}
Tensor as_dtype(const Tensor& t, DType d) {
  return t.dtype() == d ? t : t.to(d, Round::nearest_even, Overflow::ieee, 0);
}
cuda_math::PoolShape pool_shape(const Tensor& src, const Tensor& out, const Pool2dParams& p) {
  return {src.shape()[0], src.shape()[1], src.shape()[2], src.shape()[3],
          out.shape()[2], out.shape()[3], p.kernel_h,     p.kernel_w,
          p.stride_h,     p.stride_w,     p.pad_h,        p.pad_w};
}
cuda_math::ConvShape conv_shape(const Tensor& src, const Tensor& weight, const Tensor& out,
                                const Conv2dParams& p) {
  return {src.shape()[0],    src.shape()[1],    src.shape()[2], src.shape()[3], weight.shape()[0],
          weight.shape()[2], weight.shape()[3], out.shape()[2], out.shape()[3], p.stride_h,
          p.stride_w,        p.pad_h,           p.pad_w,        p.dilation_h,   p.dilation_w};
}
DType conv_compute(const Conv2dParams& p, const char* op) {
  if (p.compute != DType::fp32 && p.compute != DType::bf16 && p.compute != DType::fp16)
    unsupported(op, fmt::format("compute dtype {}", mixp::name(p.compute)));
  return p.compute;
}
}  // namespace

void CudaBackend::max_pool2d(Tensor& dst, const Tensor& src, const Pool2dParams& p) {
  const Tensor x = src.contiguous();
  need_contiguous(dst, "max_pool2d", "destination");
  launch_max_pool(dev_ptr(dst), dev_ptr(x), float_elem(x, "max_pool2d"), pool_shape(x, dst, p),
                  ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
}

void CudaBackend::max_pool2d_backward(Tensor& dsrc, const Tensor& ddst, const Tensor& src,
                                      const Pool2dParams& p) {
  constexpr const char* op = "max_pool2d_backward";
  const Tensor x = src.contiguous(), g = ddst.contiguous();
  need_contiguous(dsrc, op, "gradient");
  const Elem t = float_elem(x, op);
  if (float_elem(g, op) != t || float_elem(dsrc, op) != t) unsupported(op, "mixed dtypes");
  launch_max_pool_backward(dev_ptr(dsrc), dev_ptr(g), dev_ptr(x), t, pool_shape(x, g, p),
                           ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
}

void CudaBackend::avg_pool2d(Tensor& dst, const Tensor& src, const Pool2dParams& p) {
  const Tensor x = src.contiguous();
  need_contiguous(dst, "avg_pool2d", "destination");
  launch_avg_pool(dev_ptr(dst), dev_ptr(x), float_elem(x, "avg_pool2d"), pool_shape(x, dst, p),
                  ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
}

void CudaBackend::avg_pool2d_backward(Tensor& dsrc, const Tensor& ddst, const Pool2dParams& p) {
  constexpr const char* op = "avg_pool2d_backward";
  const Tensor g = ddst.contiguous();
  need_contiguous(dsrc, op, "gradient");
  const Elem t = float_elem(g, op);
  if (float_elem(dsrc, op) != t) unsupported(op, "mixed dtypes");
  launch_avg_pool_backward(dev_ptr(dsrc), dev_ptr(g), t, pool_shape(dsrc, g, p), ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
}

void CudaBackend::conv2d(Tensor& dst, const Tensor& src, const Tensor& weight, const Tensor& bias,
                         const Conv2dParams& p) {
  constexpr const char* op = "conv2d";
  const DType ct = conv_compute(p, op);
  need_contiguous(dst, op, "destination");
  const Tensor x = src.contiguous(), w = as_dtype(weight.contiguous(), ct);
  const cuda_math::ConvShape g = conv_shape(x, w, dst, p);
  const int64_t ckk = g.C * g.KH * g.KW, S = g.OH * g.OW;
  const Device dev = src.device();
  Tensor col = Tensor::empty(Shape{g.N, ckk, S}, {.dtype = ct, .device = dev});
  launch_im2col(dev_ptr(col), elem_of(ct, op), dev_ptr(x), float_elem(x, op), g, ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
  Tensor y32 = Tensor::empty(Shape{g.N, g.O, S}, {.dtype = DType::fp32, .device = dev});
  MatmulConfig cfg;
  cfg.compute = ct;
  gemm_lt(ctx(), y32, w.view(Shape{g.O, ckk}), col, Tensor(), cfg);
  const Tensor b = bias.defined() ? bias.contiguous() : Tensor();
  launch_conv_bias(dev_ptr(dst), float_elem(dst, op), static_cast<const float*>(dev_ptr(y32)),
                   b.defined() ? dev_ptr(b) : nullptr, b.defined() ? float_elem(b, op) : Elem::f32,
                   g.N, g.O, S, ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
}

void CudaBackend::conv2d_backward_data(Tensor& dsrc, const Tensor& ddst, const Tensor& weight,
                                       const Conv2dParams& p) {
  constexpr const char* op = "conv2d_backward_data";
  const DType ct = conv_compute(p, op);
  need_contiguous(dsrc, op, "gradient");
  const Tensor w = as_dtype(weight.contiguous(), ct), dy = as_dtype(ddst.contiguous(), ct);
  const cuda_math::ConvShape g = conv_shape(dsrc, w, dy, p);
  const int64_t ckk = g.C * g.KH * g.KW, S = g.OH * g.OW;
  Tensor dcol = Tensor::empty(Shape{g.N, ckk, S}, {.dtype = DType::fp32, .device = dsrc.device()});
  MatmulConfig cfg;
  cfg.compute = ct;
  gemm_lt(ctx(), dcol, w.view(Shape{g.O, ckk}).transpose(0, 1), dy.view(Shape{g.N, g.O, S}),
          Tensor(), cfg);
  launch_col2im(dev_ptr(dsrc), float_elem(dsrc, op), static_cast<const float*>(dev_ptr(dcol)), g,
                ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
}

void CudaBackend::conv2d_backward_weights(Tensor& dweight, Tensor& dbias, const Tensor& ddst,
                                          const Tensor& src, const Conv2dParams& p) {
  constexpr const char* op = "conv2d_backward_weights";
  const DType ct = conv_compute(p, op);
  const Tensor x = src.contiguous(), dy = as_dtype(ddst.contiguous(), ct);
  const cuda_math::ConvShape g = conv_shape(x, dweight, dy, p);
  const int64_t ckk = g.C * g.KH * g.KW, S = g.OH * g.OW;
  const Device dev = src.device();
  Tensor col = Tensor::empty(Shape{g.N, ckk, S}, {.dtype = ct, .device = dev});
  launch_im2col(dev_ptr(col), elem_of(ct, op), dev_ptr(x), float_elem(x, op), g, ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
  // dW [O, CKK] = dy [O, N*S] x col [CKK, N*S]^T: one GEMM over every image's columns.
  const Tensor dyp =
      dy.view(Shape{g.N, g.O, S}).permute(Shape{1, 0, 2}).contiguous().view(Shape{g.O, g.N * S});
  const Tensor colp = col.permute(Shape{1, 0, 2}).contiguous().view(Shape{ckk, g.N * S});
  Tensor dw32 = Tensor::empty(Shape{g.O, ckk}, {.dtype = DType::fp32, .device = dev});
  MatmulConfig cfg;
  cfg.compute = ct;
  gemm_lt(ctx(), dw32, dyp, colp.transpose(0, 1), Tensor(), cfg);
  need_contiguous(dweight, op, "weight gradient");
  Tensor dwv = dw32.view(dweight.shape());
  convert(dweight, dwv, Round::nearest_even, Overflow::ieee, 0);
  if (dbias.defined()) {
    Tensor b32 = Tensor::empty(Shape{1, g.O, 1}, {.dtype = DType::fp32, .device = dev});
    reduce(ReduceOp::sum, b32, ddst.contiguous().view(Shape{g.N, g.O, S}));
    Tensor bv = b32.view(dbias.shape());
    convert(dbias, bv, Round::nearest_even, Overflow::ieee, 0);
  }
}

void CudaBackend::batch_norm(Tensor& dst, Tensor& save_mean, Tensor& save_invstd,
                             Tensor& running_mean, Tensor& running_var, const Tensor& src,
                             const Tensor& weight, const Tensor& bias, bool training,
                             double momentum, double eps) {
  constexpr const char* op = "batch_norm";
  const Tensor x = src.contiguous();
  need_fp32_contiguous(
      {&x, &dst, &save_mean, &save_invstd, &running_mean, &running_var, &weight, &bias}, op);
  auto f = f32_or_null;
  BatchNormArgs a;
  set_nchw(a, x);
  a.src = f(x);
  a.dst = f(dst);
  a.save_mean = f(save_mean);
  a.save_invstd = f(save_invstd);
  a.running_mean = f(running_mean);
  a.running_var = f(running_var);
  a.weight = f(weight);
  a.bias = f(bias);
  a.training = training;
  a.momentum = momentum;
  a.eps = eps;
  if (!training && (!running_mean.defined() || !running_var.defined()))
    throw std::invalid_argument("mixp: batch_norm in eval mode needs the running statistics");
  launch_batch_norm(a, ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
}

void CudaBackend::batch_norm_backward(Tensor& dsrc, Tensor& dweight, Tensor& dbias,
                                      const Tensor& ddst, const Tensor& src, const Tensor& weight,
                                      const Tensor& save_mean, const Tensor& save_invstd) {
  constexpr const char* op = "batch_norm_backward";
  const Tensor x = src.contiguous(), g = ddst.contiguous();
  need_fp32_contiguous({&x, &g, &dsrc, &dweight, &dbias, &weight, &save_mean, &save_invstd}, op);
  auto f = f32_or_null;
  BatchNormArgs a;
  set_nchw(a, x);
  a.src = f(x);
  a.ddst = f(g);
  a.dsrc = f(dsrc);
  a.dweight = f(dweight);
  a.dbias = f(dbias);
  a.weight = f(weight);
  a.save_mean = f(save_mean);
  a.save_invstd = f(save_invstd);
  launch_batch_norm_backward(a, ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
}

void CudaBackend::reduce_max_backward(Tensor& dsrc, const Tensor& ddst, const Tensor& src,
                                      const Tensor& dst) {
  constexpr const char* op = "reduce_max_backward";
  if (dst.dim() != src.dim() || ddst.dim() != src.dim())
    unsupported(op, "a max without keepdim shapes");
  MaxBackwardArgs a;
  a.shape = shape_of(src.shape(), op);
  a.src = view_of(src, op);
  a.m = view_of(dst, op);
  a.g = view_of(ddst, op);
  a.dsrc = view_of(dsrc, op);
  for (const View* v : {&a.src, &a.m, &a.g, &a.dsrc})
    if (v->type != Elem::f32 && v->type != Elem::bf16 && v->type != Elem::f16)
      unsupported(op, "a dtype other than fp32, bf16 or fp16");
  int64_t stride = 1;
  for (int d = src.dim() - 1; d >= 0; --d) {
    const bool reduced = dst.shape()[d] == 1 && src.shape()[d] != 1;
    a.count_stride[d] = reduced ? 0 : stride;
    if (reduced) a.m.stride[d] = a.g.stride[d] = 0;
    stride *= dst.shape()[d];
  }
  a.groups = dst.numel();
  launch_reduce_max_backward(a, ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
}

}  // namespace mixp::cuda
