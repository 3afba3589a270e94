// CpuBackend conv2d forward / backward-data / backward-weights on oneDNN convolution primitives.
// Tensors stay in plain NCHW / OIHW (what the rest of mixp reads); the primitives are created with
// format_tag::any so oneDNN picks its blocked layouts (nChw16c ...), and LayoutArgs reorders in
// and out: with plain layouts oneDNN falls back to gemm-based convolutions that are 10-100x
// slower on small channel counts (measured: 6 s vs 20 ms for the 1->32 backward-weights of the
// CNN). Primitives and reorders are cached per shape and data types.
//
// bf16 (Conv2dParams::compute bf16): oneDNN bf16 convolutions (bf16 data, fp32 accumulation;
// dst, bias and the weight/bias gradients fp32 or bf16). fp16, and bf16 on a CPU without bf16
// dot products (cpu_bf16.h): exact emulation on the fp32 primitives (operands widened exactly,
// products exact in fp32, results rounded once).
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_bf16.h"
#include "backend/cpu/onednn_util.h"
#include "backend/narrow.h"

namespace mixp {
namespace {
using dnnl::memory;
using tag = memory::format_tag;

struct ConvDescs {
  memory::desc src, weights, bias, dst;        // plain (the tensors)
  memory::desc src_any, weights_any, dst_any;  // what the primitive may choose
  memory::dims strides, dilates, pad_l, pad_r;
};

// The data types of one convolution's arguments (src/weights/dst/bias; for backward passes the
// gradient of each argument has its argument's entry).
struct ConvTypes {
  DType src = DType::fp32, weights = DType::fp32, dst = DType::fp32, bias = DType::fp32;
};

// src/weights/dst shapes -> plain descriptors; pad_r makes oneDNN's output size match ours.
ConvDescs conv_descs(const Shape& src, const Shape& w, const Shape& dst, bool bias,
                     const Conv2dParams& p, const ConvTypes& ty = {}) {
  ConvDescs d;
  const auto ts = onednn::data_type(ty.src), tw = onednn::data_type(ty.weights),
             td = onednn::data_type(ty.dst);
  d.src = memory::desc({src[0], src[1], src[2], src[3]}, ts, tag::nchw);
  d.weights = memory::desc({w[0], w[1], w[2], w[3]}, tw, tag::oihw);
  d.dst = memory::desc({dst[0], dst[1], dst[2], dst[3]}, td, tag::nchw);
  if (bias) d.bias = memory::desc({w[0]}, onednn::data_type(ty.bias), tag::a);
  d.src_any = memory::desc({src[0], src[1], src[2], src[3]}, ts, tag::any);
  d.weights_any = memory::desc({w[0], w[1], w[2], w[3]}, tw, tag::any);
  d.dst_any = memory::desc({dst[0], dst[1], dst[2], dst[3]}, td, tag::any);
  d.strides = {p.stride_h, p.stride_w};
  d.dilates = {p.dilation_h - 1, p.dilation_w - 1};
  d.pad_l = {p.pad_h, p.pad_w};
  // out = (in + pl + pr - ((k-1)*dil + 1)) / stride + 1  ->  pr = (out-1)*stride + (k-1)*dil + 1 -
  // in - pl
  d.pad_r = {(dst[2] - 1) * p.stride_h + (w[2] - 1) * p.dilation_h + 1 - src[2] - p.pad_h,
             (dst[3] - 1) * p.stride_w + (w[3] - 1) * p.dilation_w + 1 - src[3] - p.pad_w};
  return d;
}

onednn::Key conv_key(int kind, const Shape& src, const Shape& w, const Shape& dst, bool bias,
                     const Conv2dParams& p, const ConvTypes& ty = {}) {
  onednn::Key k;
  k.add(kind);
  k.add(static_cast<int64_t>(ty.src) | static_cast<int64_t>(ty.weights) << 8 |
        static_cast<int64_t>(ty.dst) << 16 | static_cast<int64_t>(ty.bias) << 24);
  for (int i = 0; i < 4; ++i) k.add(src[i]);
  for (int i = 0; i < 4; ++i) k.add(w[i]);
  for (int i = 0; i < 4; ++i) k.add(dst[i]);
  k.add(bias);
  k.add(p.stride_h);
  k.add(p.stride_w);
  k.add(p.pad_h);
  k.add(p.pad_w);
  k.add(p.dilation_h);
  k.add(p.dilation_w);
  return k;
}

dnnl::convolution_forward::primitive_desc fwd_pd(const ConvDescs& d, bool bias) {
  const auto desc =
      bias ? dnnl::convolution_forward::desc(
                 dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, d.src_any,
                 d.weights_any, d.bias, d.dst_any, d.strides, d.dilates, d.pad_l, d.pad_r)
           : dnnl::convolution_forward::desc(
                 dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, d.src_any,
                 d.weights_any, d.dst_any, d.strides, d.dilates, d.pad_l, d.pad_r);
  return dnnl::convolution_forward::primitive_desc(desc, onednn::base_attr(), onednn::engine());
}

// Every defined tensor contiguous, non-empty (oneDNN rejects zero-sized ones), and of a dtype the
// primitive takes: fp32, or bf16 when the compute dtype is bf16 and `narrow_ok` says so for it.
bool oneDNN_ok(std::initializer_list<const Tensor*> ts, DType compute,
               std::initializer_list<bool> must_be_compute) {
  auto m = must_be_compute.begin();
  for (const Tensor* t : ts) {
    const bool must = m != must_be_compute.end() && *m;
    if (m != must_be_compute.end()) ++m;
    if (!t->defined()) continue;
    if (!t->is_contiguous() || t->numel() == 0) return false;
    if (compute == DType::fp32 && t->dtype() != DType::fp32) return false;
    if (compute == DType::bf16) {
      if (must && t->dtype() != DType::bf16) return false;
      if (t->dtype() != DType::bf16 && t->dtype() != DType::fp32) return false;
    }
  }
  return compute == DType::fp32 || (compute == DType::bf16 && onednn::supports(DType::bf16));
}

// t itself when contiguous, else a contiguous copy (oneDNN takes plain layouts here).
Tensor raw_contig(const Tensor& t) {
  if (!t.defined() || t.is_contiguous()) return t;
  Tensor c = Tensor::empty(t.shape(), {.dtype = t.dtype()});
  backend().copy(c, t);
  return c;
}

// The forward primitive a backward one is hinted with: every argument in the compute dtype.
ConvTypes hint_types(const Conv2dParams& p) {
  const DType c = p.compute == DType::bf16 ? DType::bf16 : DType::fp32;
  return ConvTypes{c, c, c, DType::fp32};
}

DType dt_or_f32(const Tensor& t) {
  return t.defined() ? t.dtype() : DType::fp32;
}

bool fp16_emulated(const Conv2dParams& p, std::initializer_list<const Tensor*> ts) {
  if (!cpu::emulated_16(p.compute)) return false;
  for (const Tensor* t : ts) {
    if (t->defined() && t->numel() == 0) return false;
  }
  return true;
}
}  // namespace

void CpuBackend::conv2d(Tensor& dst, const Tensor& src, const Tensor& weight, const Tensor& bias,
                        const Conv2dParams& p) {
  if (fp16_emulated(p, {&dst, &src, &weight})) {
    Conv2dParams p32 = p;
    p32.compute = DType::fp32;
    const Tensor x = kern::convert_view(*this, src, DType::fp32),
                 w = kern::convert_view(*this, weight, DType::fp32),
                 b = kern::convert_view(*this, bias, DType::fp32);
    kern::with_dst_as(*this, dst, DType::fp32, false,
                      [&](Tensor& d) { conv2d(d, raw_contig(x), raw_contig(w), b, p32); });
    return;
  }
  if (!oneDNN_ok({&dst, &src, &weight, &bias}, p.compute, {false, true, true, false})) {
    RefBackend::conv2d(dst, src, weight, bias, p);
    return;
  }
  const bool hb = bias.defined();
  const ConvTypes ty{src.dtype(), weight.dtype(), dst.dtype(), dt_or_f32(bias)};
  const ConvDescs d = conv_descs(src.shape(), weight.shape(), dst.shape(), hb, p, ty);
  const onednn::Key key = conv_key(10, src.shape(), weight.shape(), dst.shape(), hb, p, ty);
  onednn::CachedPrimitive& prim = onednn::cached(key, [&] {
    auto pd = fwd_pd(d, hb);
    return onednn::CachedPrimitive{dnnl::convolution_forward(pd),
                                   pd.scratchpad_desc().get_size(),
                                   {{DNNL_ARG_SRC, pd.src_desc()},
                                    {DNNL_ARG_WEIGHTS, pd.weights_desc()},
                                    {DNNL_ARG_DST, pd.dst_desc()}}};
  });
  onednn::LayoutArgs args(key, prim);
  args.input(DNNL_ARG_SRC, d.src, src);
  args.input(DNNL_ARG_WEIGHTS, d.weights, weight);
  if (hb) args.input(DNNL_ARG_BIAS, d.bias, bias);
  args.output(DNNL_ARG_DST, d.dst, dst);
  args.execute();
}

void CpuBackend::conv2d_backward_data(Tensor& dsrc, const Tensor& ddst, const Tensor& weight,
                                      const Conv2dParams& p) {
  if (fp16_emulated(p, {&dsrc, &ddst, &weight})) {
    Conv2dParams p32 = p;
    p32.compute = DType::fp32;
    const Tensor g = kern::convert_view(*this, ddst, DType::fp32),
                 w = kern::convert_view(*this, weight, DType::fp32);
    kern::with_dst_as(*this, dsrc, DType::fp32, false, [&](Tensor& d) {
      conv2d_backward_data(d, raw_contig(g), raw_contig(w), p32);
    });
    return;
  }
  if (!oneDNN_ok({&dsrc, &ddst, &weight}, p.compute, {false, true, true})) {
    RefBackend::conv2d_backward_data(dsrc, ddst, weight, p);
    return;
  }
  const ConvTypes ty{dsrc.dtype(), weight.dtype(), ddst.dtype(), DType::fp32};
  const ConvDescs d = conv_descs(dsrc.shape(), weight.shape(), ddst.shape(), false, p, ty);
  const onednn::Key key = conv_key(11, dsrc.shape(), weight.shape(), ddst.shape(), false, p, ty);
  onednn::CachedPrimitive& prim = onednn::cached(key, [&] {
    auto hint = fwd_pd(
        conv_descs(dsrc.shape(), weight.shape(), ddst.shape(), false, p, hint_types(p)), false);
    dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct, d.src_any,
                                               d.weights_any, d.dst_any, d.strides, d.dilates,
                                               d.pad_l, d.pad_r);
    dnnl::convolution_backward_data::primitive_desc pd(desc, onednn::base_attr(), onednn::engine(),
                                                       hint);
    return onednn::CachedPrimitive{dnnl::convolution_backward_data(pd),
                                   pd.scratchpad_desc().get_size(),
                                   {{DNNL_ARG_DIFF_SRC, pd.diff_src_desc()},
                                    {DNNL_ARG_WEIGHTS, pd.weights_desc()},
                                    {DNNL_ARG_DIFF_DST, pd.diff_dst_desc()}}};
  });
  onednn::LayoutArgs args(key, prim);
  args.input(DNNL_ARG_WEIGHTS, d.weights, weight);
  args.input(DNNL_ARG_DIFF_DST, d.dst, ddst);
  args.output(DNNL_ARG_DIFF_SRC, d.src, dsrc);
  args.execute();
}

void CpuBackend::conv2d_backward_weights(Tensor& dweight, Tensor& dbias, const Tensor& ddst,
                                         const Tensor& src, const Conv2dParams& p) {
  if (fp16_emulated(p, {&dweight, &ddst, &src})) {
    Conv2dParams p32 = p;
    p32.compute = DType::fp32;
    const Tensor g = kern::convert_view(*this, ddst, DType::fp32),
                 x = kern::convert_view(*this, src, DType::fp32);
    kern::with_dst_as(*this, dweight, DType::fp32, false, [&](Tensor& dw) {
      kern::with_dst_as(*this, dbias, DType::fp32, false, [&](Tensor& db) {
        conv2d_backward_weights(dw, db, raw_contig(g), raw_contig(x), p32);
      });
    });
    return;
  }
  if (!oneDNN_ok({&dweight, &dbias, &ddst, &src}, p.compute, {false, false, true, true})) {
    RefBackend::conv2d_backward_weights(dweight, dbias, ddst, src, p);
    return;
  }
  const bool hb = dbias.defined();
  const ConvTypes ty{src.dtype(), dweight.dtype(), ddst.dtype(), dt_or_f32(dbias)};
  const ConvDescs d = conv_descs(src.shape(), dweight.shape(), ddst.shape(), hb, p, ty);
  const onednn::Key key = conv_key(12, src.shape(), dweight.shape(), ddst.shape(), hb, p, ty);
  onednn::CachedPrimitive& prim = onednn::cached(key, [&] {
    auto hint =
        fwd_pd(conv_descs(src.shape(), dweight.shape(), ddst.shape(), hb, p, hint_types(p)), hb);
    const auto desc = hb ? dnnl::convolution_backward_weights::desc(
                               dnnl::algorithm::convolution_direct, d.src_any, d.weights_any,
                               d.bias, d.dst_any, d.strides, d.dilates, d.pad_l, d.pad_r)
                         : dnnl::convolution_backward_weights::desc(
                               dnnl::algorithm::convolution_direct, d.src_any, d.weights_any,
                               d.dst_any, d.strides, d.dilates, d.pad_l, d.pad_r);
    dnnl::convolution_backward_weights::primitive_desc pd(desc, onednn::base_attr(),
                                                          onednn::engine(), hint);
    return onednn::CachedPrimitive{dnnl::convolution_backward_weights(pd),
                                   pd.scratchpad_desc().get_size(),
                                   {{DNNL_ARG_SRC, pd.src_desc()},
                                    {DNNL_ARG_DIFF_WEIGHTS, pd.diff_weights_desc()},
                                    {DNNL_ARG_DIFF_DST, pd.diff_dst_desc()}}};
  });
  onednn::LayoutArgs args(key, prim);
  args.input(DNNL_ARG_SRC, d.src, src);
  args.input(DNNL_ARG_DIFF_DST, d.dst, ddst);
  args.output(DNNL_ARG_DIFF_WEIGHTS, d.weights, dweight);
  if (hb) args.output(DNNL_ARG_DIFF_BIAS, d.bias, dbias);
  args.execute();
}

}  // namespace mixp
