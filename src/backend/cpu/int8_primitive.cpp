// Int8Primitive (mixp/backend/int8_primitive.h) on oneDNN: a matmul or convolution primitive with
// output scales, an optional ReLU post-op and a destination zero point, and the weights reordered
// once into the layout the primitive chose. Moved from src/quant/int8_layers.cpp unchanged.
#include "mixp/backend/int8_primitive.h"

#include <unordered_map>

#include "backend/cpu/onednn_util.h"
#include "mixp/tensor/factories.h"

namespace mixp {

namespace {
using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

dt data_type(Int8Dst d) {
  return d == Int8Dst::u8 ? dt::u8 : d == Int8Dst::s32 ? dt::s32 : dt::f32;
}

dnnl::primitive_attr epilogue_attr(const Int8Epilogue& ep) {
  dnnl::primitive_attr attr = onednn::base_attr();
  if (!ep.scales.empty()) attr.set_output_scales(1 << 1, ep.scales);
  if (ep.relu) {
    dnnl::post_ops po;
    po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(po);
  }
  if (ep.dst_zero_point != 0) attr.set_zero_points(DNNL_ARG_DST, 0, {ep.dst_zero_point});
  return attr;
}

Tensor reorder_weights(const memory::desc& plain, const Tensor& codes, const memory::desc& want) {
  Tensor buf = empty(Shape{static_cast<int64_t>(want.get_size())}, {.dtype = DType::uint8});
  memory from(plain, onednn::engine(), codes.data_ptr());
  memory to(want, onednn::engine(), buf.data_ptr());
  dnnl::reorder::primitive_desc pd(onednn::engine(), plain, onednn::engine(), want,
                                   onednn::base_attr());
  onednn::CachedPrimitive r{dnnl::reorder(pd), pd.scratchpad_desc().get_size(), {}};
  std::unordered_map<int, memory> a{{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
  onednn::execute(r, a);
  return buf;
}

memory::dim pad_r(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad_l) {
  return (out - 1) * stride + k - in - pad_l;
}
}  // namespace

// A primitive, its scratchpad size, and the weights in its layout.
struct Int8Primitive::Impl {
  onednn::CachedPrimitive prim;
  memory::desc src_md, bias_md, dst_md;
  Tensor weights;  // bytes in the primitive's weights layout
  memory::desc weights_md;
};

Int8Primitive::Int8Primitive(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Int8Primitive::Int8Primitive(Int8Primitive&&) noexcept = default;
Int8Primitive& Int8Primitive::operator=(Int8Primitive&&) noexcept = default;
Int8Primitive::~Int8Primitive() = default;

Int8Primitive Int8Primitive::linear(int64_t M, int64_t K, int64_t O, const Tensor& w,
                                    Int8Dst dst, const Int8Epilogue& ep) {
  auto e = std::make_unique<Impl>();
  e->src_md = memory::desc({M, K}, dt::u8, tag::ab);
  e->bias_md = memory::desc({1, O}, dt::f32, tag::ab);
  e->dst_md = memory::desc({M, O}, data_type(dst), tag::ab);
  const memory::desc w_any({K, O}, dt::s8, tag::any);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(e->src_md, w_any, e->bias_md, e->dst_md),
                                        epilogue_attr(ep), onednn::engine());
  e->prim = {dnnl::matmul(pd), pd.scratchpad_desc().get_size(), {}};
  e->weights_md = pd.weights_desc();
  // W is [O, K] row-major: as the [K, O] operand it is column-major (strides {1, K}).
  const memory::desc w_plain({K, O}, dt::s8, memory::dims{1, K});
  e->weights = reorder_weights(w_plain, w, e->weights_md);
  return Int8Primitive(std::move(e));
}

Int8Primitive Int8Primitive::conv2d(const Shape& src, const Tensor& codes, int64_t OH, int64_t OW,
                                    int64_t ph, int64_t pw, int64_t sh, int64_t sw, Int8Dst dst,
                                    bool bias, const Int8Epilogue& ep) {
  const Shape& w = codes.shape();
  const int64_t N = src[0], H = src[1], W = src[2], C = src[3], O = w[0];
  auto e = std::make_unique<Impl>();
  e->src_md = memory::desc({N, C, H, W}, dt::u8, tag::nhwc);
  if (bias) e->bias_md = memory::desc({O}, dt::f32, tag::a);
  // u8 (and s32) results stay NHWC for the next int8 layer; fp32 results leave the int8 model and
  // take the NCHW layout of the rest of mixp.
  const dt ddt = data_type(dst);
  e->dst_md = memory::desc({N, O, OH, OW}, ddt, ddt == dt::f32 ? tag::nchw : tag::nhwc);
  const memory::desc w_any({O, C, w[2], w[3]}, dt::s8, tag::any);
  const memory::dims strides{sh, sw}, dil{0, 0}, pl{ph, pw};
  const memory::dims pr{pad_r(H, OH, w[2], sh, ph), pad_r(W, OW, w[3], sw, pw)};
  const auto desc =
      bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                             dnnl::algorithm::convolution_direct, e->src_md,
                                             w_any, e->bias_md, e->dst_md, strides, dil, pl, pr)
           : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                             dnnl::algorithm::convolution_direct, e->src_md,
                                             w_any, e->dst_md, strides, dil, pl, pr);
  const dnnl::convolution_forward::primitive_desc pd(desc, epilogue_attr(ep), onednn::engine());
  e->prim = {dnnl::convolution_forward(pd), pd.scratchpad_desc().get_size(), {}};
  e->weights_md = pd.weights_desc();
  const memory::desc w_plain({O, C, w[2], w[3]}, dt::s8, tag::oihw);
  e->weights = reorder_weights(w_plain, codes, e->weights_md);
  return Int8Primitive(std::move(e));
}

void Int8Primitive::run(const Tensor& src, const Tensor& bias, const Tensor& dst) {
  Impl& e = *impl_;
  std::unordered_map<int, memory> args;
  args.insert({DNNL_ARG_SRC, memory(e.src_md, onednn::engine(), src.data_ptr())});
  args.insert({DNNL_ARG_WEIGHTS, memory(e.weights_md, onednn::engine(), e.weights.data_ptr())});
  if (bias.defined()) {
    args.insert({DNNL_ARG_BIAS, memory(e.bias_md, onednn::engine(), bias.data_ptr())});
  }
  args.insert({DNNL_ARG_DST, memory(e.dst_md, onednn::engine(), dst.data_ptr())});
  onednn::execute(e.prim, args);
}

}  // namespace mixp
