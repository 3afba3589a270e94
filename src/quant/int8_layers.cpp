// Int8 Linear and Conv2d with fused requantization; see include/mixp/quant/int8_model.h for the
// arithmetic. Each layer keeps, per input shape (batch size), an Int8Primitive
// (mixp/backend/int8_primitive.h: the cpu backend's oneDNN primitive with its epilogue and the
// weights reordered once into the layout the primitive chose).
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <map>
#include <stdexcept>

#include "mixp/backend/int8_primitive.h"
#include "mixp/quant/int8_model.h"
#include "mixp/tensor/factories.h"

namespace mixp::quant {

namespace {
// Output scales and the bias in accumulator units (header comment of int8_model.h).
struct Requant {
  std::vector<float> scales;  // m / s_y, or m for fp32 output
  std::vector<float> bias;    // b / m - z_x * colsum
  bool zero_rows = false;     // some m == 0: those channels' codes are zeroed (see prepare)
};

Requant make_requant(Int8WeightLayerParams& p) {
  const int64_t O = p.weight.size(0);
  const int64_t K = p.weight.numel() / std::max<int64_t>(O, 1);
  if (static_cast<int64_t>(p.weight_scale.size()) != O ||
      static_cast<int64_t>(p.bias.size()) != O) {
    throw std::invalid_argument(
        fmt::format("mixp::quant::{}: {} weight scales and {} biases for {} output channels",
                    p.name, p.weight_scale.size(), p.bias.size(), O));
  }
  if (p.input.qmin != 0 || p.input.qmax <= 0 || p.input.qmax > 255) {
    throw std::invalid_argument(
        fmt::format("mixp::quant::{}: int8 layers take quint8 inputs (range [0, 255] or [0, 127]), "
                    "got [{}, {}]",
                    p.name, p.input.qmin, p.input.qmax));
  }
  Requant r;
  r.scales.resize(static_cast<size_t>(O));
  r.bias.resize(static_cast<size_t>(O));
  int8_t* w = p.weight.data<int8_t>();
  for (int64_t o = 0; o < O; ++o) {
    const size_t oi = static_cast<size_t>(o);
    double m = static_cast<double>(p.input.scale) * static_cast<double>(p.weight_scale[oi]);
    int64_t colsum = 0;
    for (int64_t k = 0; k < K; ++k) colsum += w[o * K + k];
    double bias_acc;
    if (m == 0.0 || !std::isfinite(m)) {
      // A channel whose multiplier is 0 (gamma == 0) outputs its bias: zero codes, m := 1.
      std::memset(w + o * K, 0, static_cast<size_t>(K));
      m = 1.0;
      bias_acc = p.bias[oi];
      r.zero_rows = true;
    } else {
      bias_acc = static_cast<double>(p.bias[oi]) / m -
                 static_cast<double>(p.input.zero_point) * static_cast<double>(colsum);
    }
    r.scales[oi] = static_cast<float>(p.output ? m / static_cast<double>(p.output->scale) : m);
    r.bias[oi] = static_cast<float>(bias_acc);
  }
  return r;
}

Int8Epilogue epilogue(const Int8WeightLayerParams& p, const Requant& r) {
  Int8Epilogue ep;
  ep.scales = r.scales;
  ep.relu = p.relu;
  if (p.output) ep.dst_zero_point = p.output->zero_point;
  return ep;
}

Int8Dst dst_type(const Int8WeightLayerParams& p) {
  return p.output ? Int8Dst::u8 : Int8Dst::f32;
}

QAct make_out(const Shape& shape, const Int8WeightLayerParams& p) {
  QAct out;
  if (p.output) {
    out.data = empty(shape, {.dtype = DType::uint8});
    out.q = *p.output;
  } else {
    out.data = empty(shape, {.dtype = DType::fp32});
  }
  return out;
}

void check_input(const QAct& in, const Int8WeightLayerParams& p, int rank, const char* who) {
  if (!in.quantized() || in.data.dim() != rank || !in.data.is_contiguous()) {
    throw std::invalid_argument(fmt::format(
        "mixp::quant::{} '{}': expected contiguous u8 codes of rank {}, got {} {}", who, p.name,
        rank, in.data.defined() ? std::string(name(in.data.dtype())) : "nothing",
        in.data.defined() ? in.data.shape().str() : ""));
  }
  if (in.q.scale != p.input.scale || in.q.zero_point != p.input.zero_point) {
    throw std::invalid_argument(fmt::format(
        "mixp::quant::{} '{}': the input codes have scale {} and zero point {}, the layer was "
        "converted for {} and {}",
        who, p.name, in.q.scale, in.q.zero_point, p.input.scale, p.input.zero_point));
  }
}

}  // namespace

// ---- Linear

struct Int8Linear::Impl {
  Requant rq;
  Tensor bias;                     // fp32 [1, O] in accumulator units
  std::map<int64_t, Int8Primitive> cache;  // by M
};

Int8Linear::Int8Linear(Int8WeightLayerParams p)
    : p_(std::move(p)), impl_(std::make_unique<Impl>()) {
  if (!p_.weight.defined() || p_.weight.dim() != 2 || p_.weight.dtype() != DType::int8) {
    throw std::invalid_argument(
        fmt::format("mixp::quant::Int8Linear '{}': the weight must be int8 [O, K]", p_.name));
  }
  p_.weight = p_.weight.contiguous().clone();  // owned: make_requant may zero rows
  impl_->rq = make_requant(p_);
  impl_->bias = from_vector(impl_->rq.bias, Shape{1, p_.weight.size(0)});
}

Int8Linear::~Int8Linear() = default;

QAct Int8Linear::forward(const QAct& in) {
  check_input(in, p_, 2, "Int8Linear");
  const int64_t M = in.data.size(0), K = in.data.size(1), O = p_.weight.size(0);
  if (K != p_.weight.size(1)) {
    throw std::invalid_argument(
        fmt::format("mixp::quant::Int8Linear '{}': input has {} features, "
                    "the weight {}",
                    p_.name, K, p_.weight.size(1)));
  }
  QAct out = make_out(Shape{M, O}, p_);
  if (M == 0) return out;
  auto it = impl_->cache.find(M);
  if (it == impl_->cache.end()) {
    it = impl_->cache
             .emplace(M, Int8Primitive::linear(M, K, O, p_.weight, dst_type(p_),
                                               epilogue(p_, impl_->rq)))
             .first;
  }
  it->second.run(in.data, impl_->bias, out.data);
  return out;
}

Int8LayerSpec Int8Linear::spec() const {
  Int8LayerSpec s{p_.name, "linear"};
  s.relu = p_.relu;
  s.output_u8 = p_.output.has_value();
  return s;
}

int64_t Int8Linear::weight_bytes() const {
  return p_.weight.numel() + 8 * p_.weight.size(0) + 16;
}

// ---- Conv2d

struct Int8Conv2d::Impl {
  Requant rq;
  Tensor bias;  // fp32 [O]
  bool explicit_pad = false;
  std::map<std::array<int64_t, 3>, Int8Primitive> cache;  // by (N, H, W) of the (padded) input
};

Int8Conv2d::Int8Conv2d(Int8WeightLayerParams p)
    : p_(std::move(p)), impl_(std::make_unique<Impl>()) {
  if (!p_.weight.defined() || p_.weight.dim() != 4 || p_.weight.dtype() != DType::int8) {
    throw std::invalid_argument(fmt::format(
        "mixp::quant::Int8Conv2d '{}': the weight must be int8 [O, C, KH, KW]", p_.name));
  }
  if (p_.conv.dilation_h != 1 || p_.conv.dilation_w != 1) {
    throw std::invalid_argument(
        fmt::format("mixp::quant::Int8Conv2d '{}': dilation is not supported", p_.name));
  }
  p_.weight = p_.weight.contiguous().clone();
  impl_->rq = make_requant(p_);
  impl_->bias = from_vector(impl_->rq.bias, Shape{p_.weight.size(0)});
  // Zero padding would stand for the real value -z_x * s_x; pad with the code of 0.0 instead.
  impl_->explicit_pad = p_.input.zero_point != 0 && (p_.conv.pad_h > 0 || p_.conv.pad_w > 0);
}

Int8Conv2d::~Int8Conv2d() = default;

namespace {
// [N, H, W, C] u8 -> [N, H + 2 ph, W + 2 pw, C] filled with `fill` around.
Tensor pad_nhwc(const Tensor& x, int64_t ph, int64_t pw, uint8_t fill) {
  const int64_t N = x.size(0), H = x.size(1), W = x.size(2), C = x.size(3);
  const int64_t PH = H + 2 * ph, PW = W + 2 * pw;
  Tensor y = empty(Shape{N, PH, PW, C}, {.dtype = DType::uint8});
  uint8_t* d = y.data<uint8_t>();
  const uint8_t* s = x.data<uint8_t>();
  std::memset(d, fill, static_cast<size_t>(y.numel()));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t h = 0; h < H; ++h) {
      std::memcpy(d + ((n * PH + h + ph) * PW + pw) * C, s + ((n * H + h) * W) * C,
                  static_cast<size_t>(W * C));
    }
  }
  return y;
}

int64_t conv_out(int64_t in, int64_t k, int64_t stride, int64_t pad) {
  return (in + 2 * pad - k) / stride + 1;
}
}  // namespace

QAct Int8Conv2d::forward(const QAct& in) {
  check_input(in, p_, 4, "Int8Conv2d");
  const Shape& ws = p_.weight.shape();
  if (in.data.size(3) != ws[1]) {
    throw std::invalid_argument(
        fmt::format("mixp::quant::Int8Conv2d '{}': input has {} channels, the weight {}", p_.name,
                    in.data.size(3), ws[1]));
  }
  const Conv2dParams& c = p_.conv;
  const int64_t N = in.data.size(0), H = in.data.size(1), W = in.data.size(2);
  const int64_t OH = conv_out(H, ws[2], c.stride_h, c.pad_h);
  const int64_t OW = conv_out(W, ws[3], c.stride_w, c.pad_w);
  if (OH <= 0 || OW <= 0) {
    throw std::invalid_argument(
        fmt::format("mixp::quant::Int8Conv2d '{}': input {} is smaller "
                    "than the kernel",
                    p_.name, in.data.shape().str()));
  }
  QAct out = make_out(p_.output ? Shape{N, OH, OW, ws[0]} : Shape{N, ws[0], OH, OW}, p_);
  if (N == 0) return out;
  Tensor src = in.data;
  int64_t ph = c.pad_h, pw = c.pad_w;
  if (impl_->explicit_pad) {
    src = pad_nhwc(src, ph, pw, static_cast<uint8_t>(p_.input.zero_point));
    ph = pw = 0;
  }
  const std::array<int64_t, 3> key{N, src.size(1), src.size(2)};
  auto it = impl_->cache.find(key);
  if (it == impl_->cache.end()) {
    it = impl_->cache
             .emplace(key, Int8Primitive::conv2d(src.shape(), p_.weight, OH, OW, ph, pw,
                                                 c.stride_h, c.stride_w, dst_type(p_), true,
                                                 epilogue(p_, impl_->rq)))
             .first;
  }
  it->second.run(src, impl_->bias, out.data);
  return out;
}

Int8LayerSpec Int8Conv2d::spec() const {
  Int8LayerSpec s{p_.name, "conv2d"};
  s.relu = p_.relu;
  s.output_u8 = p_.output.has_value();
  s.kernel = p_.weight.size(2);
  s.stride = p_.conv.stride_h;
  s.padding = p_.conv.pad_h;
  return s;
}

int64_t Int8Conv2d::weight_bytes() const {
  return p_.weight.numel() + 8 * p_.weight.size(0) + 16;
}

Tensor int8_conv2d_s32(const Tensor& src, const Tensor& weight, const Conv2dParams& p) {
  if (!src.defined() || src.dim() != 4 || src.dtype() != DType::uint8 || !weight.defined() ||
      weight.dim() != 4 || weight.dtype() != DType::int8 || src.size(3) != weight.size(1)) {
    throw std::invalid_argument(
        "mixp::quant::int8_conv2d_s32: expected src u8 [N, H, W, C] and weight int8 [O, C, KH, "
        "KW]");
  }
  const Tensor s = src.contiguous(), w = weight.contiguous();
  const int64_t OH = conv_out(s.size(1), w.size(2), p.stride_h, p.pad_h);
  const int64_t OW = conv_out(s.size(2), w.size(3), p.stride_w, p.pad_w);
  Tensor dst = empty(Shape{s.size(0), OH, OW, w.size(0)}, {.dtype = DType::int32});
  if (dst.numel() == 0) return dst;
  Int8Primitive::conv2d(s.shape(), w, OH, OW, p.pad_h, p.pad_w, p.stride_h, p.stride_w,
                        Int8Dst::s32, false, Int8Epilogue{})
      .run(s, Tensor(), dst);
  return dst;
}

}  // namespace mixp::quant
