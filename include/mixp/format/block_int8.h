// 8-bit integer quantization, per tensor and per channel, symmetric and affine: PyTorch's
// observer and fake-quantize arithmetic (torch/ao/quantization/observer.py _calculate_qparams,
// aten fake_quantize_per_tensor_affine; docs/formats.md "Integer quantization"), bit for bit
// in fp32.
//
//   ranges      qint8 [-128, 127]  ([-64, 63] with reduce_range)
//               quint8 [0, 255]    ([0, 127] with reduce_range)
//   observer    min_neg = min(min, 0), max_pos = max(max, 0)            (so 0 is always exact)
//   symmetric   scale = max(-min_neg, max_pos) / ((qmax - qmin) / 2)    zero point 0 (quint8: 128)
//   affine      scale = (max_pos - min_neg) / (qmax - qmin)
//               zp = clamp(qmin - round_half_even(min_neg / scale), qmin, qmax)
//   both        scale = max(scale, 2^-23)  (torch.finfo(float32).eps), every step in fp32
//   quantize    q = clamp(zp + round(x * (1/scale)), qmin, qmax), 1/scale in fp32, x * it in fp32,
//               round = Round::nearest_even for PyTorch's nearbyint (other modes on request)
//   dequantize  x' = float(q - zp) * scale (one fp32 rounding)
// Differences from PyTorch, on purpose:
//  - quantize clamps to the observer's [qmin, qmax] (PyTorch's fake quantize does; its real
//    quantize_per_tensor clamps to the full dtype range even with reduce_range).
//  - symmetric quint8 with reduce_range throws, as PyTorch's observer constructor does.
//  - NaN/inf min or max throw (PyTorch yields scale NaN/inf silently). An empty tensor
//    (min = +inf, max = -inf) gives scale 1, zero point 0, as PyTorch's check_min_max_valid.
//  - fake quantization: NaN stays NaN and +-inf saturate to the range ends (PyTorch casts
//    nearbyint(inf) to int64, which is undefined behaviour).
// Stored codes: qint8 as two's complement bytes, quint8 as unsigned bytes.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "mixp/format/rounding.h"

namespace mixp {

enum class QDType : uint8_t { qint8, quint8 };
enum class QScheme : uint8_t { symmetric, affine };

struct Int8Config {
  QDType dtype = QDType::qint8;
  QScheme scheme = QScheme::symmetric;
  bool reduce_range = false;
};

struct QuantRange {
  int32_t qmin;
  int32_t qmax;
};
QuantRange quant_range(QDType dtype, bool reduce_range);

// Scale, zero point and the integer range they apply to.
struct QParams {
  float scale = 1.0f;
  int32_t zero_point = 0;
  int32_t qmin = -128;
  int32_t qmax = 127;
  bool is_signed() const { return qmin < 0; }  // qint8 codes are stored two's complement
};

inline constexpr float kQParamsMinScale = 0x1p-23f;  // torch.finfo(torch.float32).eps

// The observer formula above (reusable by min-max / moving-average observers).
QParams compute_qparams(float min_val, float max_val, const Int8Config& cfg);

struct MinMax {
  float min;
  float max;
};
// Min and max of the values (NaN if any value is NaN; {+inf, -inf} when empty).
MinMax tensor_minmax(std::span<const float> x);
// Per-channel min/max along `axis` of a row-major tensor (negative axis counts from the end).
std::vector<MinMax> channel_minmax(std::span<const float> x, std::span<const int64_t> shape,
                                   int axis);
std::vector<QParams> compute_qparams_per_channel(std::span<const MinMax> mm, const Int8Config& cfg);

// One value. quantize_int8_value requires a non-NaN x (quantize_int8 throws on NaN).
int32_t quantize_int8_value(float x, const QParams& p, Round round, uint32_t random_bits);
float dequantize_int8_value(int32_t q, const QParams& p);
// PyTorch's fake quantization of one value; *in_range (optional) gets the straight-through
// mask: qmin <= zp + round(x / scale) <= qmax before clamping (false for NaN).
float fake_quantize_int8_value(float x, const QParams& p, bool* in_range);

// Whole tensors. `dst`/`q` hold one byte per value (see "Stored codes"). Stochastic rounding
// draws value i's bits from sr_bits(seed, i). quantize_int8 throws std::invalid_argument on NaN
// (int8 has no NaN; the message names the index).
void quantize_int8(std::span<uint8_t> dst, std::span<const float> x, const QParams& p, Round round,
                   uint64_t seed);
void dequantize_int8(std::span<float> dst, std::span<const uint8_t> q, const QParams& p);
// In place; `mask` (empty, or one byte per value) receives the straight-through mask (1/0).
void fake_quantize_int8(std::span<float> x, const QParams& p, std::span<uint8_t> mask);

// Per channel: p[c] applies to the values whose index along `axis` is c.
void quantize_int8_per_channel(std::span<uint8_t> dst, std::span<const float> x,
                               std::span<const int64_t> shape, int axis, std::span<const QParams> p,
                               Round round, uint64_t seed);
void dequantize_int8_per_channel(std::span<float> dst, std::span<const uint8_t> q,
                                 std::span<const int64_t> shape, int axis,
                                 std::span<const QParams> p);
void fake_quantize_int8_per_channel(std::span<float> x, std::span<const int64_t> shape, int axis,
                                    std::span<const QParams> p, std::span<uint8_t> mask);

}  // namespace mixp
