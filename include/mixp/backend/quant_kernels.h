// The host kernels of the quant runtime (quant/int8_model.h, quant/weight_only.h, quant/qlora.h,
// quant/lowbit_model.h), implemented by the cpu backend (src/backend/cpu/qkernels.h,
// lowbit_codes_kernel.h): a narrow interface so that quant reaches no backend/cpu/ header
// (docs/architecture.md 2.2; tests/lint/layering.py).
//
// qk::kernels(): elementwise kernels in three tiers (docs/architecture.md 6.6), the same source
// (src/backend/cpu/qkernels.inc) compiled for baseline x86-64, AVX2+FMA and AVX-512; kernels()
// picks one from simd_tier(). (The baseline tier is scalar for the select-heavy loops: SSE2 has
// no blend.) The loops are branch-free so GCC vectorizes them; they reproduce block_int8's
// scalar reference bit for bit (tests/quant):
//
//   v = x * inv_scale (fp32, inv_scale = 1 / scale in fp32, as PyTorch)
//   r = nearest-even integer of v: (min(max(v, -2^22), 2^22) + 1.5 * 2^23) - 1.5 * 2^23, exact
//       for |v| <= 2^22 (the sum lands in [2^23, 2^24) where the fp32 spacing is 1); larger |v|
//       is clamped first, which changes nothing since such q lies outside every int8 range
//   q = r + zero_point; in range <=> qmin <= q <= qmax (the straight-through mask)
//   fake quantization y = (clamp(q, qmin, qmax) - zero_point) * scale; NaN stays NaN (mask 0)
//   straight-through gradient dx = dy * mask (as PyTorch: a NaN dy stays NaN where mask is 0)
//
// qk::lowbit_codes: the loops of the backends' lowbit_codes (backend.h LowBitCodesSpec) on raw
// host memory, for the packer's reference lowbit_weight_codes_raw (quant/lowbit.h), so the
// trained codes and the packed model's codes agree bit for bit.
#pragma once
#include <cstdint>

#include "mixp/backend/backend.h"

namespace mixp::qk {

struct QP {
  float scale, inv_scale, zero_point, qmin, qmax;
};

struct Kernels {
  const char* tier;
  // y = fake_quantize(x); mask[i] = 1 where q is in range (mask may be null).
  void (*fake_quant)(float* y, uint8_t* mask, const float* x, int64_t n, QP p);
  // gx = mask ? g : 0
  void (*ste_backward)(float* gx, const float* g, const uint8_t* mask, int64_t n);
  // Codes clamp(q, qmin, qmax) as unsigned bytes (quint8; NaN gives zero_point).
  void (*quantize_u8)(uint8_t* q, const float* x, int64_t n, QP p);
  // y[i] = scale * (float(q[i]) - zero_point)
  void (*dequantize_u8)(float* y, const uint8_t* q, int64_t n, float scale, float zero_point);
  // 2x2 stride-2 max pooling of an NHWC u8 image: x [H, W, C] -> y [H/2, W/2, C] (floor).
  void (*maxpool2x2_nhwc_u8)(uint8_t* y, const uint8_t* x, int64_t H, int64_t W, int64_t C);
  // Min and max of n values, and whether one is NaN or +-inf (*nonfinite). Empty: +inf, -inf.
  void (*minmax)(const float* x, int64_t n, float* mn, float* mx, bool* nonfinite);
  // 4-bit blocks (block_int4.h) -> fp32 values [lo, hi) of the flat order (lo even, `block`
  // even): y[i - lo] = lut[code(i)] * scales[i / block]; `high_first`: element 2j in the high
  // nibble (NF4), else the low one (int4).
  void (*dequant4)(float* y, const uint8_t* data, const float* scales, int64_t lo, int64_t hi,
                   int64_t block, const float* lut, bool high_first);
};

// The tier this CPU runs (the same table for the life of the process).
const Kernels& kernels();

// codes, scales (weight kinds: [O]) and mask (or nullptr) of src seen as [O, K] (activation
// kinds: O * K elements), as LowBitCodesSpec says; parallel over rows.
void lowbit_codes(const LowBitCodesSpec& spec, const float* src, int64_t O, int64_t K,
                  float* codes, float* scales, uint8_t* mask);

}  // namespace mixp::qk
