// CpuBackend conv2d forward / backward-data / backward-weights on oneDNN convolution primitives.
// Tensors stay in plain NCHW / OIHW (what the rest of mixp reads); the primitives are created with
// format_tag::any so oneDNN picks its blocked layouts (nChw16c ...), and LayoutArgs reorders in
// and out: with plain layouts oneDNN falls back to gemm-based convolutions that are 10-100x
// slower on small channel counts (measured: 6 s vs 20 ms for the 1->32 backward-weights of the
// CNN). Primitives and reorders are cached per shape.
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/onednn_util.h"

namespace mixp {
namespace {
using dnnl::memory;
using tag = memory::format_tag;

struct ConvDescs {
  memory::desc src, weights, bias, dst;        // plain (the tensors)
  memory::desc src_any, weights_any, dst_any;  // what the primitive may choose
  memory::dims strides, dilates, pad_l, pad_r;
};

// src/weights/dst shapes -> plain descriptors; pad_r makes oneDNN's output size match ours.
ConvDescs conv_descs(const Shape& src, const Shape& w, const Shape& dst, bool bias,
                     const Conv2dParams& p) {
  ConvDescs d;
  const auto f32 = memory::data_type::f32;
  d.src = memory::desc({src[0], src[1], src[2], src[3]}, f32, tag::nchw);
  d.weights = memory::desc({w[0], w[1], w[2], w[3]}, f32, tag::oihw);
  d.dst = memory::desc({dst[0], dst[1], dst[2], dst[3]}, f32, tag::nchw);
  if (bias) d.bias = memory::desc({w[0]}, f32, tag::a);
  d.src_any = memory::desc({src[0], src[1], src[2], src[3]}, f32, tag::any);
  d.weights_any = memory::desc({w[0], w[1], w[2], w[3]}, f32, tag::any);
  d.dst_any = memory::desc({dst[0], dst[1], dst[2], dst[3]}, f32, tag::any);
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
                     const Conv2dParams& p) {
  onednn::Key k;
  k.add(kind);
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

bool all_f32_contiguous(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    // zero-sized tensors go to the ref loops (oneDNN rejects them)
    if (t->defined() && (t->dtype() != DType::fp32 || !t->is_contiguous() || t->numel() == 0))
      return false;
  }
  return true;
}
}  // namespace

void CpuBackend::conv2d(Tensor& dst, const Tensor& src, const Tensor& weight, const Tensor& bias,
                        const Conv2dParams& p) {
  if (!all_f32_contiguous({&dst, &src, &weight, &bias}) || p.compute != DType::fp32) {
    RefBackend::conv2d(dst, src, weight, bias, p);
    return;
  }
  const bool hb = bias.defined();
  const ConvDescs d = conv_descs(src.shape(), weight.shape(), dst.shape(), hb, p);
  const onednn::Key key = conv_key(10, src.shape(), weight.shape(), dst.shape(), hb, p);
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
  if (!all_f32_contiguous({&dsrc, &ddst, &weight}) || p.compute != DType::fp32) {
    RefBackend::conv2d_backward_data(dsrc, ddst, weight, p);
    return;
  }
  const ConvDescs d = conv_descs(dsrc.shape(), weight.shape(), ddst.shape(), false, p);
  const onednn::Key key = conv_key(11, dsrc.shape(), weight.shape(), ddst.shape(), false, p);
  onednn::CachedPrimitive& prim = onednn::cached(key, [&] {
    auto hint = fwd_pd(d, false);
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
  if (!all_f32_contiguous({&dweight, &dbias, &ddst, &src}) || p.compute != DType::fp32) {
    RefBackend::conv2d_backward_weights(dweight, dbias, ddst, src, p);
    return;
  }
  const bool hb = dbias.defined();
  const ConvDescs d = conv_descs(src.shape(), dweight.shape(), ddst.shape(), hb, p);
  const onednn::Key key = conv_key(12, src.shape(), dweight.shape(), ddst.shape(), hb, p);
  onednn::CachedPrimitive& prim = onednn::cached(key, [&] {
    auto hint = fwd_pd(d, hb);
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
