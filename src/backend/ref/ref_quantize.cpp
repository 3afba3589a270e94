// The ref backend's scaling and quantization kernels (backend.h: amax, minmax, quantize,
// mask_grad, scale_bias_act): one element at a time through the format module's reference codecs
// (encode_float / decode_float, mx_fake_quantize, fake_quantize_int8_value), the oracle that
// tests/backend/test_quantize_kernels.cpp holds the cpu backend's tiered loops to, bit for bit.
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "backend/cpu/lowbit_codes_kernel.h"
#include "backend/kernel_util.h"
#include "backend/ref/ref_backend.h"
#include "mixp/format/block_int8.h"
#include "mixp/format/block_mx.h"
#include "mixp/format/float_codec.h"

namespace mixp {

namespace {

using kern::ptr;

const float* f32_in(const Tensor& t, const char* kernel) {
  if (!t.defined() || t.dtype() != DType::fp32 || !t.is_contiguous()) {
    throw std::logic_error(std::string("mixp ref backend: ") + kernel +
                           " needs contiguous fp32 operands");
  }
  return ptr<const float>(t);
}

const FloatFormat& fp8_format(DType fp8) {
  if (fp8 == DType::fp8_e4m3) return kFp8E4M3;
  if (fp8 == DType::fp8_e5m2) return kFp8E5M2;
  throw std::invalid_argument("FP8 quantization: the format must be fp8_e4m3 or fp8_e5m2, got " +
                              std::string(name(fp8)));
}

// bf16 bits of an fp32 value, rounded to nearest even (IEEE overflow).
uint16_t bf16_bits(float v) {
  return static_cast<uint16_t>(
      encode_float(kBf16, v, Round::nearest_even, Overflow::ieee, 0, nullptr));
}

float amax_loop(const float* x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::fmax(m, std::fabs(x[i]));  // fmax skips NaN
  return m;
}

}  // namespace

void RefBackend::amax(Tensor& dst, const Tensor& src) {
  ptr<float>(dst)[0] = amax_loop(f32_in(src, "amax"), src.numel());
}

void RefBackend::minmax(Tensor& min, Tensor& max, const Tensor& src, int64_t channels,
                        int64_t inner) {
  const float* x = f32_in(src, "minmax");
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> mn(static_cast<size_t>(channels), kInf), mx(mn.size(), -kInf);
  std::vector<bool> bad(mn.size(), false);
  const int64_t block = channels * inner;
  for (int64_t i = 0; i < src.numel(); ++i) {
    const auto c = static_cast<size_t>(block ? (i % block) / inner : 0);
    if (!std::isfinite(x[i])) bad[c] = true;
    mn[c] = std::min(mn[c], x[i]);
    mx[c] = std::max(mx[c], x[i]);
  }
  for (size_t c = 0; c < mn.size(); ++c) {
    ptr<float>(min)[c] = bad[c] ? nan : mn[c];
    ptr<float>(max)[c] = bad[c] ? nan : mx[c];
  }
}

void RefBackend::quantize(const QuantizeSpec& spec, Tensor& dst, Tensor& aux, const Tensor& src) {
  if (spec.kind == QuantizeSpec::Kind::fp8_mx && spec.along_columns) {
    // Blocks down the columns of a 2-D src: the rows of its transpose, quantized, transposed back.
    if (src.dim() != 2 || dst.shape() != src.shape())
      throw std::invalid_argument(
          "quantize: MX blocks along columns need a 2-D src and a dst of the same shape");
    Tensor t = Tensor::empty(Shape{src.shape()[1], src.shape()[0]},
                             {.dtype = DType::fp32, .device = src.device()});
    copy(t, src.t());
    Tensor q = Tensor::empty(t.shape(), {.dtype = dst.dtype(), .device = dst.device()});
    QuantizeSpec rows = spec;
    rows.along_columns = false;
    quantize(rows, q, aux, t);
    copy(dst, q.t());
    return;
  }
  const float* x = f32_in(src, "quantize");
  const int64_t n = src.numel();
  switch (spec.kind) {
    case QuantizeSpec::Kind::fp8_tensor: {
      const FloatFormat& f = fp8_format(spec.format);
      auto* out = ptr<uint16_t>(dst);
      for (int64_t i = 0; i < n; ++i) {
        const float v = x[i] * spec.scale;  // the product in fp32, then one rounding to fp8
        const auto q = static_cast<float>(decode_float(
            f, encode_float(f, v, Round::nearest_even, Overflow::saturate, 0, nullptr)));
        out[i] = bf16_bits(q);
      }
      if (aux.defined()) ptr<float>(aux)[0] = amax_loop(x, n);
      return;
    }
    case QuantizeSpec::Kind::fp8_mx: {
      (void)fp8_format(spec.format);
      if (n == 0) return;
      std::vector<float> v(x, x + n);
      const MxElement e =
          spec.format == DType::fp8_e5m2 ? MxElement::fp8_e5m2 : MxElement::fp8_e4m3;
      mx_fake_quantize(v, src.dim() == 0 ? 1 : src.size(-1), e, {.block_size = spec.block});
      auto* out = ptr<uint16_t>(dst);
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_bits(v[static_cast<size_t>(i)]);
      return;
    }
    case QuantizeSpec::Kind::int_fake: {
      float* y = ptr<float>(dst);
      uint8_t* m = aux.defined() ? ptr<uint8_t>(aux) : nullptr;
      const auto channels = static_cast<int64_t>(spec.params.size());
      for (int64_t i = 0; i < n; ++i) {
        const int64_t c = spec.inner ? (i / spec.inner) % channels : 0;
        const QuantizeSpec::IntParams& p = spec.params[static_cast<size_t>(c)];
        const QParams q{p.scale, static_cast<int32_t>(p.zero_point), static_cast<int32_t>(p.qmin),
                        static_cast<int32_t>(p.qmax)};
        bool in = false;
        y[i] = fake_quantize_int8_value(x[i], q, &in);
        if (m) m[i] = in ? 1 : 0;
      }
      return;
    }
  }
}

// The low-bit codes: the shared loops of lowbit_codes_kernel.h are already the plain scalar
// reference (one element at a time, no vector tier), so the ref backend calls them rather than
// keep a second copy that could drift (tests/quant/test_lowbit.cpp checks their values).
void RefBackend::lowbit_codes(const LowBitCodesSpec& spec, Tensor& codes, Tensor& scales,
                              Tensor& mask, const Tensor& src) {
  const float* x = f32_in(src, "lowbit_codes");
  const bool weight =
      spec.kind != LowBitCodesSpec::Kind::act_int && spec.kind != LowBitCodesSpec::Kind::act_sign;
  const int64_t O = weight ? scales.numel() : 1, K = src.numel() / std::max<int64_t>(O, 1);
  cpu::lowbit_codes_loop(spec, x, O, K, ptr<float>(codes), weight ? ptr<float>(scales) : nullptr,
                         mask.defined() ? ptr<uint8_t>(mask) : nullptr);
}

void RefBackend::lowbit_codes_backward(Tensor& dsrc, const Tensor& ddst, const Tensor& mask,
                                       const Tensor& inv_scales, int64_t inner) {
  const float* g = f32_in(ddst, "lowbit_codes_backward");
  const float* inv = f32_in(inv_scales, "lowbit_codes_backward");
  float* d = ptr<float>(dsrc);
  const uint8_t* m = ptr<const uint8_t>(mask);
  const int64_t channels = inv_scales.numel(), n = ddst.numel();
  for (int64_t i = 0; i < n; ++i) d[i] = m[i] ? g[i] * inv[(i / inner) % channels] : 0.0f;
}

void RefBackend::mask_grad(Tensor& dsrc, const Tensor& ddst, const Tensor& mask) {
  const float* g = f32_in(ddst, "mask_grad");
  float* out = ptr<float>(dsrc);
  const bool bytes = mask.dtype() == DType::uint8;
  const float* mf = bytes ? nullptr : f32_in(mask, "mask_grad");
  for (int64_t i = 0; i < ddst.numel(); ++i) {
    // The straight-through mask multiplies (PyTorch); the ReLU's output selects.
    out[i] = bytes ? g[i] * static_cast<float>(ptr<const uint8_t>(mask)[i])
                   : (mf[i] > 0.0f ? g[i] : 0.0f);
  }
}

void RefBackend::scale_bias_act(Tensor& dst, const Tensor& src, const Tensor& bias, float alpha,
                                Activation act) {
  const float* x = f32_in(src, "scale_bias_act");
  if (act == Activation::gelu) {
    throw std::logic_error("mixp ref backend: scale_bias_act takes act none or relu");
  }
  const float* b = bias.defined() ? f32_in(bias, "scale_bias_act") : nullptr;
  const int64_t n = src.dim() == 0 ? 1 : src.size(-1);
  float* y = ptr<float>(dst);
  for (int64_t i = 0; i < src.numel(); ++i) {
    const float v = b ? std::fma(x[i], alpha, b[i % n]) : x[i] * alpha;
    y[i] = act == Activation::relu && !(v > 0.0f) ? 0.0f : v;
  }
}

}  // namespace mixp
