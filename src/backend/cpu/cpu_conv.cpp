// CpuBackend conv2d forward / backward-data / backward-weights on oneDNN convolution primitives.
// Tensors stay in plain NCHW / OIHW (what the rest of mixp reads); oneDNN picks its best
// implementation for those layouts. Primitives are cached per shape.
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/onednn_util.h"

namespace mixp {
namespace {
using dnnl::memory;
using tag = memory::format_tag;

struct ConvDescs {
  memory::desc src, weights, bias, dst;
  memory::dims strides, dilates, pad_l, pad_r;
};

// src/weights/dst shapes -> plain descriptors; pad_r makes oneDNN's output size match ours.
ConvDescs conv_descs(const Shape& src, const Shape& w, const Shape& dst, bool bias, const Conv2dParams& p) {
  ConvDescs d;
  const auto f32 = memory::data_type::f32;
  d.src = memory::desc({src[0], src[1], src[2], src[3]}, f32, tag::nchw);
  d.weights = memory::desc({w[0], w[1], w[2], w[3]}, f32, tag::oihw);
  d.dst = memory::desc({dst[0], dst[1], dst[2], dst[3]}, f32, tag::nchw);
  if (bias) d.bias = memory::desc({w[0]}, f32, tag::a);
  d.strides = {p.stride_h, p.stride_w};
  d.dilates = {p.dilation_h - 1, p.dilation_w - 1};
  d.pad_l = {p.pad_h, p.pad_w};
  // out = (in + pl + pr - ((k-1)*dil + 1)) / stride + 1  ->  pr = (out-1)*stride + (k-1)*dil + 1 - in - pl
  d.pad_r = {(dst[2] - 1) * p.stride_h + (w[2] - 1) * p.dilation_h + 1 - src[2] - p.pad_h,
             (dst[3] - 1) * p.stride_w + (w[3] - 1) * p.dilation_w + 1 - src[3] - p.pad_w};
  return d;
}

onednn::Key conv_key(int kind, const Shape& src, const Shape& w, const Shape& dst, bool bias, const Conv2dParams& p) {
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
  const auto desc = bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                                           d.src, d.weights, d.bias, d.dst, d.strides, d.dilates, d.pad_l, d.pad_r)
                         : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                                           d.src, d.weights, d.dst, d.strides, d.dilates, d.pad_l, d.pad_r);
  return dnnl::convolution_forward::primitive_desc(desc, onednn::base_attr(), onednn::engine());
}

bool all_f32_contiguous(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (t->defined() && (t->dtype() != DType::fp32 || !t->is_contiguous())) return false;
  }
  return true;
}
}  // namespace

void CpuBackend::conv2d(Tensor& dst, const Tensor& src, const Tensor& weight, const Tensor& bias, const Conv2dParams& p) {
  if (!all_f32_contiguous({&dst, &src, &weight, &bias}) || p.compute != DType::fp32) {
    RefBackend::conv2d(dst, src, weight, bias, p);
    return;
  }
  const bool hb = bias.defined();
  const ConvDescs d = conv_descs(src.shape(), weight.shape(), dst.shape(), hb, p);
  onednn::CachedPrimitive& prim = onednn::cached(conv_key(10, src.shape(), weight.shape(), dst.shape(), hb, p), [&] {
    auto pd = fwd_pd(d, hb);
    return onednn::CachedPrimitive{dnnl::convolution_forward(pd), pd.scratchpad_desc().get_size()};
  });
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, onednn::memory(d.src, src)},
                                       {DNNL_ARG_WEIGHTS, onednn::memory(d.weights, weight)},
                                       {DNNL_ARG_DST, onednn::memory(d.dst, dst)}};
  if (hb) args.insert({DNNL_ARG_BIAS, onednn::memory(d.bias, bias)});
  onednn::execute(prim, args);
}

void CpuBackend::conv2d_backward_data(Tensor& dsrc, const Tensor& ddst, const Tensor& weight, const Conv2dParams& p) {
  if (!all_f32_contiguous({&dsrc, &ddst, &weight}) || p.compute != DType::fp32) {
    RefBackend::conv2d_backward_data(dsrc, ddst, weight, p);
    return;
  }
  const ConvDescs d = conv_descs(dsrc.shape(), weight.shape(), ddst.shape(), false, p);
  onednn::CachedPrimitive& prim = onednn::cached(conv_key(11, dsrc.shape(), weight.shape(), ddst.shape(), false, p), [&] {
    auto hint = fwd_pd(d, false);
    dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct, d.src, d.weights, d.dst, d.strides,
                                               d.dilates, d.pad_l, d.pad_r);
    dnnl::convolution_backward_data::primitive_desc pd(desc, onednn::base_attr(), onednn::engine(), hint);
    return onednn::CachedPrimitive{dnnl::convolution_backward_data(pd), pd.scratchpad_desc().get_size()};
  });
  std::unordered_map<int, memory> args{{DNNL_ARG_DIFF_SRC, onednn::memory(d.src, dsrc)},
                                       {DNNL_ARG_WEIGHTS, onednn::memory(d.weights, weight)},
                                       {DNNL_ARG_DIFF_DST, onednn::memory(d.dst, ddst)}};
  onednn::execute(prim, args);
}

void CpuBackend::conv2d_backward_weights(Tensor& dweight, Tensor& dbias, const Tensor& ddst, const Tensor& src,
                                         const Conv2dParams& p) {
  if (!all_f32_contiguous({&dweight, &dbias, &ddst, &src}) || p.compute != DType::fp32) {
    RefBackend::conv2d_backward_weights(dweight, dbias, ddst, src, p);
    return;
  }
  const bool hb = dbias.defined();
  const ConvDescs d = conv_descs(src.shape(), dweight.shape(), ddst.shape(), hb, p);
  onednn::CachedPrimitive& prim = onednn::cached(conv_key(12, src.shape(), dweight.shape(), ddst.shape(), hb, p), [&] {
    auto hint = fwd_pd(d, hb);
    const auto desc = hb ? dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, d.src, d.weights,
                                                                    d.bias, d.dst, d.strides, d.dilates, d.pad_l, d.pad_r)
                         : dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, d.src, d.weights,
                                                                    d.dst, d.strides, d.dilates, d.pad_l, d.pad_r);
    dnnl::convolution_backward_weights::primitive_desc pd(desc, onednn::base_attr(), onednn::engine(), hint);
    return onednn::CachedPrimitive{dnnl::convolution_backward_weights(pd), pd.scratchpad_desc().get_size()};
  });
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, onednn::memory(d.src, src)},
                                       {DNNL_ARG_DIFF_WEIGHTS, onednn::memory(d.weights, dweight)},
                                       {DNNL_ARG_DIFF_DST, onednn::memory(d.dst, ddst)}};
  if (hb) args.insert({DNNL_ARG_DIFF_BIAS, onednn::memory(d.bias, dbias)});
  onednn::execute(prim, args);
}

}  // namespace mixp
