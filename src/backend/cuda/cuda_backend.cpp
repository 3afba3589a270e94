// CudaBackend: argument checks and descriptors around the CUDA kernels (cuda_backend.h).
#include "backend/cuda/cuda_backend.h"

#include <fmt/format.h>

#include <memory>
#include <mutex>
#include <stdexcept>

#include "backend/cuda/math/attention_math.h"
#include "backend/cuda/math/pointwise_math.h"
#include "backend/cuda_entry.h"
#include "backend/narrow.h"
#include "mixp/backend/cuda.h"

namespace mixp::cuda {

// The kernels take the op codes of math/pointwise_math.h; they are the enums' values.
static_assert(static_cast<int>(UnaryOp::gelu_erf) == cuda_math::u_gelu_erf);
static_assert(static_cast<int>(UnaryOp::sigmoid) == cuda_math::u_sigmoid);
static_assert(static_cast<int>(BinaryOp::div) == cuda_math::b_div);
static_assert(static_cast<int>(ScalarOp::rdiv) == cuda_math::s_rdiv);

void not_implemented(const char* op) {
  throw std::runtime_error(fmt::format(
      "mixp: {} is not implemented on cuda yet (docs/cuda.md lists what is); run this step on "
      "the cpu device",
      op));
}

[[noreturn]] void unsupported(const char* op, const std::string& what) {
  throw std::runtime_error(
      fmt::format("mixp: {} on cuda: {} is not implemented on cuda yet (docs/cuda.md)", op, what));
}

Elem elem_of(DType t, const char* op) {
  switch (t) {
    case DType::fp32: return Elem::f32;
    case DType::bf16: return Elem::bf16;
    case DType::fp16: return Elem::f16;
    case DType::tf32: return Elem::tf32;
    case DType::fp8_e4m3: return Elem::e4m3;
    case DType::fp8_e5m2: return Elem::e5m2;
    case DType::int64: return Elem::raw8;
    case DType::int32: return Elem::raw4;
    case DType::int8:
    case DType::uint8:
    case DType::boolean: return Elem::raw1;
    default: break;
  }
  unsupported(op, std::string("dtype ") + std::string(name(t)));
}

Shape8 shape_of(const Shape& s, const char* op) {
  if (s.size() > kMaxRank) unsupported(op, fmt::format("a tensor of rank {} (max 8)", s.size()));
  Shape8 r;
  r.rank = static_cast<int>(s.size());
  for (int d = 0; d < r.rank; ++d) r.size[d] = s[d];
  return r;
}

View view_of(const Tensor& t, const char* op) {
  View v;
  if (!t.defined()) return v;
  if (t.dim() > kMaxRank) unsupported(op, fmt::format("a tensor of rank {} (max 8)", t.dim()));
  v.data = dev_ptr(t);
  v.type = elem_of(t.dtype(), op);
  for (int d = 0; d < t.dim(); ++d) v.stride[d] = t.strides()[d];
  return v;
}

namespace {
bool is_raw(Elem e) {
  return e == Elem::raw1 || e == Elem::raw2 || e == Elem::raw4 || e == Elem::raw8;
}
bool is_float32_dense(const Tensor& t) {
  return t.dtype() == DType::fp32 && t.is_contiguous();
}
void require_f32(const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (!t->defined()) continue;
    if (t->dtype() != DType::fp32)
      unsupported(op, std::string("dtype ") + std::string(name(t->dtype())) + " (fp32 only)");
    if (!t->is_contiguous()) unsupported(op, "a strided operand (contiguous only)");
  }
}
const float* fptr(const Tensor& t) {
  return t.defined() ? static_cast<const float*>(dev_ptr(t)) : nullptr;
}
float* fptr_mut(Tensor& t) {
  return t.defined() ? static_cast<float*>(dev_ptr(t)) : nullptr;
}
bool idx64_of(const Tensor& idx, const char* op) {
  if (idx.dtype() != DType::int64 && idx.dtype() != DType::int32)
    unsupported(op, "indices of dtype " + std::string(name(idx.dtype())));
  if (!idx.is_contiguous()) unsupported(op, "strided indices");
  return idx.dtype() == DType::int64;
}
}  // namespace

void CudaBackend::pointwise(PointwiseArgs& a, const Tensor& dst) {
  DeviceContext& c = ctx();
  a.shape = shape_of(dst.shape(), "pointwise");
  launch_pointwise(a, c.stream);
  MIXP_CUDA_CHECK_LAUNCH();
}

void CudaBackend::copy(Tensor& dst, const Tensor& src) {
  PointwiseArgs a;
  a.kind = PointwiseKind::copy;
  a.dst = view_of(dst, "copy");
  a.a = view_of(src, "copy");
  if ((is_raw(a.dst.type) || is_raw(a.a.type)) && a.dst.type != a.a.type)
    unsupported("copy", fmt::format("{} to {}", mixp::name(src.dtype()), mixp::name(dst.dtype())));
  pointwise(a, dst);
}

void CudaBackend::convert(Tensor& dst, const Tensor& src, Round round, Overflow overflow,
                          uint64_t seed) {
  PointwiseArgs a;
  a.kind = PointwiseKind::convert;
  a.dst = view_of(dst, "convert");
  a.a = view_of(src, "convert");
  if (is_raw(a.dst.type) || is_raw(a.a.type)) {
    if (a.dst.type != a.a.type)
      unsupported("convert", fmt::format("{} to {}", mixp::name(src.dtype()), mixp::name(dst.dtype())));
    a.kind = PointwiseKind::copy;
  }
  a.round = round;
  a.overflow = overflow;
  a.seed = seed;
  pointwise(a, dst);
}

void CudaBackend::fill(Tensor& dst, double value) {
  if (dst.numel() == 0) return;
  PointwiseArgs a;
  a.kind = PointwiseKind::fill;
  a.dst = view_of(dst, "fill");
  if (is_raw(a.dst.type)) {
    if (value != 0.0 || !dst.is_contiguous()) unsupported("fill", "a non-zero integer fill");
    DeviceContext& c = ctx();
    MIXP_CUDA_CHECK(cudaMemsetAsync(dev_ptr(dst), 0, dst.nbytes(), c.stream));
    return;
  }
  a.s = static_cast<float>(value);
  pointwise(a, dst);
}

void CudaBackend::add_inplace(Tensor& dst, const Tensor& src, double alpha) {
  PointwiseArgs a;
  a.kind = PointwiseKind::add_inplace;
  a.dst = view_of(dst, "add_inplace");
  a.a = view_of(src, "add_inplace");
  a.s = static_cast<float>(alpha);
  pointwise(a, dst);
}

void CudaBackend::unary(UnaryOp op, Tensor& dst, const Tensor& src) {
  PointwiseArgs a;
  a.kind = PointwiseKind::unary;
  a.op = static_cast<int>(op);
  a.dst = view_of(dst, "unary");
  a.a = view_of(src, "unary");
  pointwise(a, dst);
}

void CudaBackend::unary_backward(UnaryOp op, Tensor& dsrc, const Tensor& ddst, const Tensor& src,
                                 const Tensor& dst) {
  PointwiseArgs a;
  a.kind = PointwiseKind::unary_bwd;
  a.op = static_cast<int>(op);
  a.dst = view_of(dsrc, "unary_backward");
  a.a = view_of(ddst, "unary_backward");
  a.b = view_of(src, "unary_backward");
  a.c = view_of(dst, "unary_backward");
  pointwise(a, dsrc);
}

void CudaBackend::binary(BinaryOp op, Tensor& dst, const Tensor& x, const Tensor& y) {
  PointwiseArgs a;
  a.kind = PointwiseKind::binary;
  a.op = static_cast<int>(op);
  a.dst = view_of(dst, "binary");
  a.a = view_of(x, "binary");
  a.b = view_of(y, "binary");
  pointwise(a, dst);
}

void CudaBackend::scalar(ScalarOp op, Tensor& dst, const Tensor& src, double s) {
  PointwiseArgs a;
  a.kind = PointwiseKind::scalar;
  a.op = static_cast<int>(op);
  a.dst = view_of(dst, "scalar");
  a.a = view_of(src, "scalar");
  a.s = static_cast<float>(s);
  pointwise(a, dst);
}

void CudaBackend::dropout(Tensor& dst, const Tensor& src, double p, uint64_t seed) {
  PointwiseArgs a;
  a.kind = PointwiseKind::dropout;
  a.dst = view_of(dst, "dropout");
  a.a = view_of(src, "dropout");
  a.seed = seed;
  // kern::dropout_threshold (src/backend/kernel_util.h).
  const double t = p * 4294967296.0;
  a.threshold = t >= 4294967295.0 ? 0xFFFFFFFFu : static_cast<uint32_t>(t);
  a.s = static_cast<float>(1.0 / (1.0 - p));
  pointwise(a, dst);
}

void CudaBackend::reduce(ReduceOp op, Tensor& dst, const Tensor& src) {
  if (!dst.is_contiguous()) unsupported("reduce", "a strided destination");
  ReduceArgs a;
  a.op = static_cast<int>(op);
  a.src_shape = shape_of(src.shape(), "reduce");
  a.src = view_of(src, "reduce");
  a.dst = dev_ptr(dst);
  a.dst_type = elem_of(dst.dtype(), "reduce");
  a.dst_shape = shape_of(dst.shape(), "reduce");
  if (is_raw(a.src.type) || is_raw(a.dst_type)) unsupported("reduce", "integer tensors");
  launch_reduce(a, ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
}

void CudaBackend::argmax(Tensor& dst, const Tensor& src, int dim) {
  if (!src.is_contiguous()) unsupported("argmax", "a strided source");
  const Elem t = elem_of(src.dtype(), "argmax");
  if (t == Elem::raw1 || t == Elem::raw2) unsupported("argmax", "8/16-bit integer sources");
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= src.shape()[d];
  for (int d = dim + 1; d < src.dim(); ++d) inner *= src.shape()[d];
  launch_argmax(static_cast<int64_t*>(dev_ptr(dst)), dev_ptr(src), t, outer,
                src.shape()[dim], inner, ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
}

namespace {
// [rows, n] of a softmax over the last dim.
void rows_of(const Tensor& t, int dim, const char* op, int64_t& rows, int64_t& n) {
  if (dim != t.dim() - 1 && !(dim == -1))
    unsupported(op, "a softmax over a dim other than the last");
  n = t.dim() ? t.shape()[t.dim() - 1] : 1;
  rows = n ? t.numel() / n : 0;
}
}  // namespace

void CudaBackend::softmax(Tensor& dst, const Tensor& src, int dim, bool log) {
  require_f32("softmax", {&dst, &src});
  int64_t rows, n;
  rows_of(src, dim, "softmax", rows, n);
  launch_softmax(fptr_mut(dst), fptr(src), rows, n, log, ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
}

void CudaBackend::softmax_backward(Tensor& dsrc, const Tensor& ddst, const Tensor& dst, int dim,
                                   bool log) {
  require_f32("softmax_backward", {&dsrc, &ddst, &dst});
  int64_t rows, n;
  rows_of(dst, dim, "softmax_backward", rows, n);
  launch_softmax_backward(fptr_mut(dsrc), fptr(ddst), fptr(dst), rows, n, log, ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
}

void CudaBackend::layer_norm(Tensor& dst, Tensor& mean, Tensor& rstd, const Tensor& src,
                             const Tensor& weight, const Tensor& bias, double eps) {
  require_f32("layer_norm", {&dst, &mean, &rstd, &src, &weight, &bias});
  const int64_t rows = mean.numel();
  const int64_t n = rows ? src.numel() / rows : 0;
  launch_layer_norm(fptr_mut(dst), fptr_mut(mean), fptr_mut(rstd), fptr(src), fptr(weight),
                    fptr(bias), rows, n, static_cast<float>(eps), ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
}

void CudaBackend::layer_norm_xhat(Tensor& dst, const Tensor& src, const Tensor& mean,
                                  const Tensor& rstd) {
  require_f32("layer_norm_xhat", {&src, &mean, &rstd});
  const int64_t rows = mean.numel();
  const int64_t n = rows ? src.numel() / rows : 0;
  launch_layer_norm_xhat(dev_ptr(dst), elem_of(dst.dtype(), "layer_norm_xhat"), fptr(src),
                         fptr(mean), fptr(rstd), rows, n, ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
}

void CudaBackend::layer_norm_backward(Tensor& dsrc, Tensor& dweight, Tensor& dbias,
                                      const Tensor& ddst, const Tensor& src, const Tensor& weight,
                                      const Tensor& mean, const Tensor& rstd) {
  require_f32("layer_norm_backward", {&dsrc, &dweight, &dbias, &ddst, &src, &weight, &mean, &rstd});
  const int64_t rows = mean.numel();
  const int64_t n = rows ? src.numel() / rows : 0;
  launch_layer_norm_backward(fptr_mut(dsrc), fptr_mut(dweight), fptr_mut(dbias), fptr(ddst),
                             fptr(src), fptr(weight), fptr(mean), fptr(rstd), rows, n,
                             ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
}

void CudaBackend::embedding(Tensor& dst, const Tensor& weight, const Tensor& indices) {
  require_f32("embedding", {&dst, &weight});
  const bool i64 = idx64_of(indices, "embedding");
  launch_embedding(fptr_mut(dst), fptr(weight), dev_ptr(indices), i64, indices.numel(),
                   weight.shape()[1], weight.shape()[0], ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
}

void CudaBackend::embedding_backward(Tensor& dweight, const Tensor& ddst, const Tensor& indices) {
  require_f32("embedding_backward", {&dweight, &ddst});
  const bool i64 = idx64_of(indices, "embedding_backward");
  launch_embedding_backward(fptr_mut(dweight), fptr(ddst), dev_ptr(indices), i64,
                            indices.numel(), dweight.shape()[1], dweight.shape()[0], ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
}

void CudaBackend::matmul(Tensor& dst, const Tensor& a, const Tensor& b, const Tensor& bias,
                         const MatmulConfig& cfg) {
  if (!kern::is_fp8(cfg.compute)) {
    gemm_lt(ctx(), dst, a, b, bias, cfg);
    return;
  }
  // The FP8 recipes' codes (mixp::gemm, backend/gemm.h): unscaled, the scales follow in
  // scale_bias_act.
  if (bias.defined() || cfg.activation != Activation::none || cfg.accumulate)
    unsupported("matmul", "an FP8 GEMM with a bias, an activation or accumulate");
  if (a.dtype() != cfg.compute)
    unsupported("matmul", fmt::format("an FP8 GEMM whose a is {} with compute {}",
                                      mixp::name(a.dtype()), mixp::name(cfg.compute)));
  fp8_gemm(ctx(), dst, a, b, nullptr, nullptr, /*fast_accum=*/false);
}

bool CudaBackend::fp8_matmul() const {
  return fp8_gemm_native(context(index_));
}

namespace {
// The shared geometry of attention's operands: [B, H, T, D], contiguous, one float dtype.
AttnArgs attn_args(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                   const Tensor& o, bool causal, double scale) {
  for (const Tensor* t : {&q, &k, &v, &o}) {
    if (!t->is_contiguous()) unsupported(op, "strided q, k, v or output");
    if (t->dtype() != q.dtype()) unsupported(op, "q, k, v and output of different dtypes");
  }
  if (q.dtype() != DType::fp32 && q.dtype() != DType::bf16 && q.dtype() != DType::fp16)
    unsupported(op, "dtype " + std::string(mixp::name(q.dtype())));
  AttnArgs a;
  a.BH = q.shape()[0] * q.shape()[1];
  a.Tq = q.shape()[2];
  a.Tk = k.shape()[2];
  a.D = q.shape()[3];
  if (a.D > cuda_math::kAttnMaxHeadDim) unsupported(op, "a head dimension above 256");
  a.causal = causal;
  a.scale = static_cast<float>(scale);
  a.type = elem_of(q.dtype(), op);
  a.elem_bytes = q.element_size();
  a.q = dev_ptr(q);
  a.k = dev_ptr(k);
  a.v = dev_ptr(v);
  a.out = dev_ptr(o);
  return a;
}
}  // namespace

void CudaBackend::attention(Tensor& dst, Tensor& lse, const Tensor& q, const Tensor& k,
                            const Tensor& v, bool causal, double scale) {
  require_f32("attention", {&lse});
  AttnArgs a = attn_args("attention", q, k, v, dst, causal, scale);
  a.lse = fptr_mut(lse);
  launch_attention_forward(a, ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
}

void CudaBackend::attention_backward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& ddst,
                                     const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& dst, const Tensor& lse, bool causal,
                                     double scale) {
  constexpr const char* op = "attention_backward";
  require_f32(op, {&lse});
  AttnArgs a = attn_args(op, q, k, v, dst, causal, scale);
  if (!ddst.is_contiguous() || ddst.dtype() != q.dtype()) unsupported(op, "this ddst layout");
  a.dout = dev_ptr(ddst);
  a.lse = fptr_mut(const_cast<Tensor&>(lse));
  // fp32 accumulators: dk/dv are sums over query rows (atomics); dq is one row per thread.
  const Device dev = q.device();
  auto f32 = [&](Tensor& t) {
    return t.dtype() == DType::fp32 && t.is_contiguous()
               ? t
               : Tensor::empty(t.shape(), {.dtype = DType::fp32, .device = dev});
  };
  Tensor dq32 = f32(dq), dk32 = f32(dk), dv32 = f32(dv);
  fill(dk32, 0.0);
  fill(dv32, 0.0);
  a.dq32 = fptr_mut(dq32);
  a.dk32 = fptr_mut(dk32);
  a.dv32 = fptr_mut(dv32);
  launch_attention_backward(a, ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
  for (auto [dst_t, acc] : {std::pair<Tensor*, Tensor*>{&dq, &dq32}, {&dk, &dk32}, {&dv, &dv32}}) {
    if (dst_t->is_same(*acc)) continue;  // accumulated in place (fp32, contiguous)
    copy(*dst_t, *acc);
  }
}

void CudaBackend::cross_entropy(Tensor& loss, Tensor& lse, const Tensor& logits,
                                const Tensor& targets) {
  require_f32("cross_entropy", {&loss, &lse, &logits});
  const bool i64 = idx64_of(targets, "cross_entropy");
  const int64_t rows = logits.shape()[0], n = logits.shape()[1];
  launch_cross_entropy(fptr_mut(loss), fptr_mut(lse), fptr(logits), dev_ptr(targets), i64, rows,
                       n, n, ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
}

void CudaBackend::cross_entropy_backward(Tensor& dlogits, const Tensor& dloss,
                                         const Tensor& logits, const Tensor& targets,
                                         const Tensor& lse) {
  require_f32("cross_entropy_backward", {&dlogits, &dloss, &logits, &lse});
  const bool i64 = idx64_of(targets, "cross_entropy_backward");
  const int64_t rows = logits.shape()[0], n = logits.shape()[1];
  launch_cross_entropy_backward(fptr_mut(dlogits), fptr(dloss), fptr(logits), dev_ptr(targets),
                                i64, fptr(lse), rows, n, n, ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
}

// The fused classifier (backend.h): the same row kernels with the padded row stride; fp32 only
// so far (bf16/fp16 logits are refused by require_f32, docs/cuda.md).
void CudaBackend::cross_entropy_in_place(Tensor& loss, Tensor& lse, const Tensor& logits,
                                         const Tensor& targets, int64_t classes) {
  require_f32("cross_entropy_in_place", {&loss, &lse, &logits});
  const bool i64 = idx64_of(targets, "cross_entropy_in_place");
  const int64_t rows = logits.shape()[0], ld = logits.shape()[1];
  launch_cross_entropy(fptr_mut(loss), fptr_mut(lse), fptr(logits), dev_ptr(targets), i64, rows,
                       classes, ld, ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
}

void CudaBackend::cross_entropy_in_place_backward(Tensor& dlogits, const Tensor& dloss,
                                                  const Tensor& targets, const Tensor& lse,
                                                  int64_t classes) {
  require_f32("cross_entropy_in_place_backward", {&dlogits, &dloss, &lse});
  const bool i64 = idx64_of(targets, "cross_entropy_in_place_backward");
  const int64_t rows = dlogits.shape()[0], ld = dlogits.shape()[1];
  launch_cross_entropy_backward(fptr_mut(dlogits), fptr(dloss), fptr(dlogits), dev_ptr(targets),
                                i64, fptr(lse), rows, classes, ld, ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
}

void CudaBackend::unscale_check(Tensor& grad, Tensor& found_inf, double inv_scale) {
  if (!grad.is_contiguous()) unsupported("unscale_check", "a strided gradient");
  require_f32("unscale_check", {&found_inf});
  const Elem t = elem_of(grad.dtype(), "unscale_check");
  if (is_raw(t)) unsupported("unscale_check", "integer gradients");
  launch_unscale_check(dev_ptr(grad), t, grad.numel(), static_cast<float>(inv_scale),
                       fptr_mut(found_inf), ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
}

void CudaBackend::sum_squares(Tensor& dst, const Tensor& src) {
  require_f32("sum_squares", {&src});
  if (dst.dtype() != DType::fp64) unsupported("sum_squares", "a destination other than fp64");
  launch_sum_squares(static_cast<double*>(dev_ptr(dst)), fptr(src), src.numel(), ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
}

void CudaBackend::optimizer_update(const ParamUpdate& u, const UpdateRule& rule) {
  constexpr const char* op = "optimizer_update";
  OptimArgs a;
  a.adam = rule.kind == UpdateRule::Kind::adam;
  for (int k = 0; k < 9; ++k) a.s[k] = static_cast<float>(rule.s[k]);
  a.sgd_first = rule.sgd_first;
  a.sgd_nesterov = rule.sgd_nesterov;
  a.sgd_momentum = rule.sgd_momentum;
  a.sgd_wd = rule.sgd_weight_decay;
  a.n = u.values.numel();
  for (const Tensor& s : u.slots) require_f32(op, {&s});  // bf16 states: not on cuda yet
  if (a.adam && u.slots.size() != 2) unsupported(op, "Adam without its two state slots");
  if (u.slots.size() > 0) a.slot0 = fptr_mut(const_cast<Tensor&>(u.slots[0]));
  if (u.slots.size() > 1) a.slot1 = fptr_mut(const_cast<Tensor&>(u.slots[1]));
  if (!u.grad.is_contiguous() || !u.values.is_contiguous())
    unsupported(op, "strided parameters or gradients");
  a.g = dev_ptr(u.grad);
  a.g_type = elem_of(u.grad.dtype(), op);
  if (u.values.dtype() == DType::fp32) {
    a.w = fptr_mut(const_cast<Tensor&>(u.values));
  } else {
    if (!u.chunked) unsupported(op, "fp64 parameters");
    a.param = dev_ptr(u.values);
    a.param_type = elem_of(u.values.dtype(), op);
    if (u.master.defined()) {
      require_f32(op, {&u.master});
      a.w = fptr_mut(const_cast<Tensor&>(u.master));
    }
    if (u.comp.defined()) a.comp = dev_ptr(u.comp);
  }
  a.write_back = u.write_back;
  a.overflow = u.overflow;
  a.seed = u.seed;
  // A ZeRO 3 row shard's draw offset (backend.h ParamUpdate::offset): element i rounds with the
  // draw of element offset + i of the whole parameter, as on the cpu.
  a.offset = u.offset;
  if (u.shadow.defined()) {
    a.shadow = dev_ptr(u.shadow);
    a.shadow_type = elem_of(u.shadow.dtype(), op);
  }
  launch_optimizer_update(a, ctx().stream);
  MIXP_CUDA_CHECK_LAUNCH();
}

}  // namespace mixp::cuda

namespace mixp::detail {

Backend& cuda_backend(int index) {
  cuda::require_device(index);
  static std::mutex mu;
  static std::unique_ptr<cuda::CudaBackend> backends[64];
  if (index >= 64) throw std::runtime_error("mixp: more than 64 CUDA devices");
  std::lock_guard lock(mu);
  if (!backends[index]) backends[index] = std::make_unique<cuda::CudaBackend>(index);
  return *backends[index];
}

}  // namespace mixp::detail
