// The element rules of the scaling, quantization and statistics kernels (cuda_quant.cu: amax,
// minmax, quantize's three kinds, mask_grad, lowbit_codes and its gradient, scale_bias_act,
// fp8_scale_update, count_nonfinite, binary_cross_entropy), with the same operations in the same
// order as the ref backend (src/backend/ref/ref_quantize.cpp, ref_stats.cpp, ref_bce.cpp,
// src/backend/cpu/lowbit_codes_kernel.cpp, src/format/block_mx.cpp, block_int8.cpp).
// tests/cuda/test_cuda_math.cpp runs them on the CPU against the ref and cpu backends bit for
// bit. Where the ref sums in double in element order (the ternary threshold, the binary weight
// scale, the binary cross entropy), the GPU kernels run that sum in one thread, in order, so that
// the result is the same double.
#pragma once
#include <cmath>
#include <cstdint>

#include "backend/cuda/math/float_encode.h"
#include "backend/math/host_device.h"

namespace mixp::cuda_math {

inline constexpr float kMinScaleF = 0x1p-23f;  // block_int8.h's floor (torch.finfo(float32).eps)
inline constexpr float kFltMax = 3.402823466e38f;

// --- amax: max |x| with NaN ignored (fmax), as amax_loop. |x| of a non-NaN fp32 orders as its
// bits, so the GPU reduces with an unsigned atomicMax over amax_key; the result is bits_f32(key).
MIXP_HD uint32_t amax_key(float x) {
  const uint32_t a = f32_bits(x) & 0x7FFFFFFFU;
  return a > 0x7F800000U ? 0U : a;  // NaN: ignored (0 is the starting value)
}
MIXP_HD float amax_step(float m, float x) {  // the ref's loop body
  return std::fmax(m, std::fabs(x));
}

// --- minmax, per channel: the ref keeps the first of equal values (std::min / std::max), so the
// GPU combines contiguous runs of a channel's elements in element order with these.
struct MinMaxAcc {
  float mn, mx;
  bool bad;  // a NaN or +-inf was seen
};
MIXP_HD MinMaxAcc minmax_init() {
  return {INFINITY, -INFINITY, false};
}
MIXP_HD void minmax_add(MinMaxAcc& a, float x) {
  if (!std::isfinite(x)) a.bad = true;
  a.mn = x < a.mn ? x : a.mn;  // std::min(mn, x)
  a.mx = a.mx < x ? x : a.mx;  // std::max(mx, x)
}
// `later` covers elements after `earlier`'s.
MIXP_HD MinMaxAcc minmax_merge(const MinMaxAcc& earlier, const MinMaxAcc& later) {
  MinMaxAcc r;
  r.bad = earlier.bad || later.bad;
  r.mn = later.mn < earlier.mn ? later.mn : earlier.mn;
  r.mx = earlier.mx < later.mx ? later.mx : earlier.mx;
  return r;
}
MIXP_HD float minmax_min(const MinMaxAcc& a) {
  return a.bad ? NAN : a.mn;
}
MIXP_HD float minmax_max(const MinMaxAcc& a) {
  return a.bad ? NAN : a.mx;
}

// bf16 bits of an fp32 value, nearest even (IEEE overflow).
MIXP_HD uint16_t bf16_rne(float v) {
  return static_cast<uint16_t>(encode_f32(kBf16(), v, Round::nearest_even, Overflow::ieee, 0));
}

// --- quantize fp8_tensor: bf16 bits of round_fp8(x * scale) (nearest even, saturating).
// fp8_tensor_code is the same value as its 8-bit code (the dst of a backend with
// Backend::fp8_matmul(), whose GEMMs read the codes): fp8_tensor_element(x) is exactly
// bf16_rne(decode(fp8_tensor_code(x))).
MIXP_HD uint8_t fp8_tensor_code(float x, float scale, bool e5m2) {
  const MiniFormat f = e5m2 ? kE5m2() : kE4m3();
  const float v = x * scale;
  return static_cast<uint8_t>(encode_f32(f, v, Round::nearest_even, Overflow::saturate, 0));
}
MIXP_HD uint16_t fp8_tensor_element(float x, float scale, bool e5m2) {
  const MiniFormat f = e5m2 ? kE5m2() : kE4m3();
  return bf16_rne(decode_f32(f, fp8_tensor_code(x, scale, e5m2)));
}

// --- quantize fp8_mx (block_mx.cpp): the shared exponent of a block from the largest |x| bits
// (every NaN orders above inf), clamped to e8m0's [-127, 127]; kMxNan when the block holds a NaN
// or inf.
inline constexpr int kMxNan = 1000;
MIXP_HD uint32_t mx_abs_bits(float x) {
  return f32_bits(x) & 0x7FFFFFFFU;
}
MIXP_HD int mx_block_exponent(uint32_t amax_bits, bool e5m2) {
  if (amax_bits >= 0x7F800000U) return kMxNan;
  const int emax = e5m2 ? 15 : 8;
  int lg;
  if (amax_bits == 0) {
    lg = -126;
  } else if ((amax_bits >> 23) != 0) {
    lg = static_cast<int>(amax_bits >> 23) - 127;
  } else {
    lg = (31 - clz32(amax_bits & 0x7FFFFFU)) - 149;
  }
  const int e = lg - emax;
  return e < -127 ? -127 : (e > 127 ? 127 : e);
}
// 2^e as an fp32 for e in [-149, 127] (exact).
MIXP_HD float pow2f(int e) {
  return e >= -126 ? bits_f32(static_cast<uint32_t>(e + 127) << 23) : bits_f32(1U << (e + 149));
}
// One element of an MX block with shared exponent s: encode x * 2^-s (exact in fp32 wherever the
// fp8 result is not 0) saturating, decode, times 2^s (one fp32 rounding, as the double product
// rounded once), then bf16.
MIXP_HD uint16_t mx_element(float x, int s, bool e5m2) {
  if (s == kMxNan) return bf16_rne(bits_f32(0x7FC00000U));
  const MiniFormat f = e5m2 ? kE5m2() : kE4m3();
  // x * 2^-s in two exact steps when 2^-s alone is not an fp32 normal (s = -127: 2^127 is).
  const float scaled = x * pow2f(-s);
  const uint32_t code = encode_f32(f, scaled, Round::nearest_even, Overflow::saturate, 0);
  return bf16_rne(decode_f32(f, code) * pow2f(s));
}

// --- quantize int_fake (fake_quantize_int8_value): v = x * (1 / scale) in fp32, q = zp +
// nearest-even(v) in double, dst = (clamp(q) - zp) * scale; NaN stays NaN with mask 0.
MIXP_HD double round_even_d(double v) {  // detail::round_to_integer(v, nearest_even)
  const double a = std::fabs(v);
  if (!(a < 0x1p52)) return v;
  const double fl = std::floor(a);
  const double f = a - fl;
  double r = fl;
  if (f > 0.5 || (f == 0.5 && (static_cast<int64_t>(fl) & 1))) r = fl + 1.0;
  return std::copysign(r, v);
}
MIXP_HD float int_fake_element(float x, float scale, float zero_point, float qmin, float qmax,
                               uint8_t* in_range) {
  if (std::isnan(x)) {
    *in_range = 0;
    return x;
  }
  const float v = x * (1.0f / scale);
  const auto zp = static_cast<int32_t>(zero_point);
  const auto lo = static_cast<int32_t>(qmin), hi = static_cast<int32_t>(qmax);
  const double q = zp + round_even_d(v);
  *in_range = q >= lo && q <= hi ? 1 : 0;
  const double c = q < lo ? lo : (q > hi ? hi : q);
  const auto qc = static_cast<int32_t>(c);
  return static_cast<float>(qc - zp) * scale;
}

// --- the low-bit codes (lowbit_codes_kernel.cpp).
MIXP_HD float round_even_f(float v) {  // cpu::round_even
  constexpr float kMagic = 0x1p23f;
  const float a = std::fabs(v);
  return a < 0x1p22f ? std::copysign((a + kMagic) - kMagic, v) : std::rint(v);
}
MIXP_HD float clampf(float q, float lo, float hi) {  // std::clamp: NaN stays NaN
  return q < lo ? lo : (hi < q ? hi : q);
}
// weight_int, per row: the scale from the row's min(.., 0) and max(.., 0).
MIXP_HD float lowbit_row_scale(float mn, float mx, float qmin, float qmax) {
  const float amax = -mn < mx ? mx : -mn;  // std::max(-mn, mx)
  const float s = amax / ((qmax - qmin) / 2.0f);
  return s < kMinScaleF ? kMinScaleF : s;  // std::max(s, kMinScale)
}
// weight_int and act_int: code and mask of one element, given inv = 1 / scale.
MIXP_HD float lowbit_int_code(float x, float inv, float qmin, float qmax, uint8_t* mask) {
  const float q = round_even_f(x * inv);
  *mask = q >= qmin && q <= qmax ? 1 : 0;
  return clampf(q, qmin, qmax);
}
MIXP_HD float lowbit_sign_code(float x, uint8_t* mask) {
  *mask = std::fabs(x) <= 1.0f ? 1 : 0;
  return x >= 0.0f ? 1.0f : -1.0f;
}
MIXP_HD float ternary_code(float x, float delta) {
  return x > delta ? 1.0f : (x < -delta ? -1.0f : 0.0f);
}
// delta = 0.7 * mean |w| from the double sum in element order.
MIXP_HD float ternary_delta(double sum, int64_t n) {
  return static_cast<float>(0.7 * sum / static_cast<double>(n > 1 ? n : 1));
}
MIXP_HD float mean_abs_scale(double sum, int64_t count) {
  if (count == 0) return kMinScaleF;
  const float m = static_cast<float>(sum / static_cast<double>(count));
  return m < kMinScaleF ? kMinScaleF : m;
}

// --- mask_grad and the low-bit straight-through gradient.
MIXP_HD float ste_u8(float g, uint8_t m) {
  return g * static_cast<float>(m);
}
MIXP_HD float ste_relu(float g, float y) {
  return y > 0.0f ? g : 0.0f;
}
MIXP_HD float lowbit_ste(float g, uint8_t m, float inv) {
  return m ? g * inv : 0.0f;
}

// --- scale_bias_act: fma(x, alpha, b) with a bias (the ref's and the cpu's vector tiers'), else
// x * alpha; relu(NaN) = 0.
MIXP_HD float scale_bias_act_element(float x, float alpha, const float* bias, bool relu) {
  const float v = bias ? std::fma(x, alpha, *bias) : x * alpha;
  return relu && !(v > 0.0f) ? 0.0f : v;
}

// --- fp8_scale_update (ref_stats.cpp, amp::fp8_scale_from_amax), one thread.
MIXP_HD float fp8_scale_from_amax_f(float amax, float fp8_max, int margin, float previous) {
  if (!(amax > 0.0f) || !std::isfinite(amax)) return previous;
  const float scaled_max = fp8_max * pow2f(-margin);
  const float s = scaled_max / amax;
  return std::isinf(s) ? kFltMax : s;
}
MIXP_HD void fp8_scale_update_state(float* h, int64_t n, float* scale, float* scale_inv, bool roll,
                                    float amax_in, bool most_recent, float fp8_max, int margin) {
  if (!roll) {
    h[0] = std::fmax(h[0], amax_in);
    return;
  }
  const float last = h[0];
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float a = i < n - 1 ? h[i + 1] : last;
    amax = std::fmax(amax, a);
    h[i] = i > 0 ? a : 0.0f;
  }
  if (most_recent) amax = last;
  scale[0] = fp8_scale_from_amax_f(amax, fp8_max, margin, scale[0]);
  scale_inv[0] = 1.0f / scale[0];
}

// --- count_nonfinite: 0 NaN, 1 inf, -1 finite, from the bits of an fp32/bf16/fp16/fp64 value.
MIXP_HD int nonfinite_class(uint64_t bits, uint64_t exp_mask, uint64_t man_mask) {
  if ((bits & exp_mask) != exp_mask) return -1;
  return (bits & man_mask) ? 0 : 1;
}

// --- binary cross entropy (ref_bce.cpp), in double.
MIXP_HD double clamped_log(double v) {
  const double l = std::log(v);
  return l < -100.0 ? -100.0 : l;  // std::max(log(v), -100)
}
MIXP_HD double bce_term(double v, double y, bool logits) {
  if (logits) {
    const double m = v < 0.0 ? 0.0 : v;  // std::max(v, 0.0): NaN stays
    return m - v * y + std::log1p(std::exp(-std::fabs(v)));
  }
  return y * clamped_log(v) + (1.0 - y) * clamped_log(1.0 - v);  // subtracted by the caller
}
// acc after one more element (the ref: acc += term on logits, acc -= term on probabilities).
MIXP_HD double bce_accumulate(double acc, double v, double y, bool logits) {
  return logits ? acc + bce_term(v, y, true) : acc - bce_term(v, y, false);
}
MIXP_HD double bce_dx(double v, double y, bool logits) {
  if (logits) return 1.0 / (1.0 + std::exp(-v)) - y;
  const double d = (1.0 - v) * v;
  return (v - y) / (d < 1e-12 ? 1e-12 : d);  // std::max((1 - v) v, 1e-12)
}
MIXP_HD double bce_dtarget(double v, bool logits) {
  return logits ? -v : clamped_log(1.0 - v) - clamped_log(v);
}

}  // namespace mixp::cuda_math
