// Quantization below 8 bits for training (docs/quantization.md, "Below 8 bits"): the weight and
// activation quantizers of the low-bit QAT recipes (int4-qat, int2-qat, ternary, binary,
// binary-act), as autograd ops with straight-through gradients.
//
// The quantizers return integer *codes* (held in fp32, exact), not dequantized values: a low-bit
// layer multiplies codes by codes and applies the scales after the GEMM (lowbit_qat.h), so that
// the packed model (lowbit_model.h), which multiplies the same codes in integers, reproduces the
// fake-quantized model bit for bit.
//
// Weights, per scheme (w one tensor, o its output channel = index along axis 0):
//   int8/int4/int2  symmetric per output channel, b bits, qmin = -2^(b-1), qmax = 2^(b-1) - 1:
//                   amax[o] = max |w[o]|, scale[o] = max(amax[o] / ((qmax - qmin) / 2), 2^-23)
//                   (block_int8.h's symmetric formula with the range of b bits, in fp32),
//                   code = clamp(nearbyint(w * (1 / scale[o])), qmin, qmax) (ties to even);
//                   the scale follows the current weights (a min/max observer without history)
//   ternary         TWN (Li et al. 2016), one threshold per layer: delta = 0.7 * mean |w|,
//                   code = +1 if w > delta, -1 if w < -delta, else 0;
//                   scale = mean of |w| over the codes != 0 (the same for every channel)
//   binary          BinaryConnect / XNOR-Net weights: code = +1 if w >= 0 else -1,
//                   scale[o] = mean |w[o]|
// Means are summed in double in index order and rounded once to fp32.
// Straight-through gradient: the dequantized weight scale[o] * code has gradient 1 (inside the
// range), so d code / d w = 1 / scale[o], masked to 0 where the int code was clamped and, for
// binary, where |w| > 1 (BinaryConnect's clip).
//
// Activations, per tensor (ActCodeKind):
//   unsigned_bits   b bits after a ReLU: scale = max(max / (2^b - 1), 2^-23),
//                   code = clamp(nearbyint(x * (1 / scale)), 0, 2^b - 1)
//   signed8         the model input: scale = max(-min, max) / 127.5, code in [-128, 127]
//   signed_bits     b bits (2..8), symmetric, for the input of a layer in any Module tree
//                   (prepare_lowbit_qat's tree form, where it need not follow a ReLU):
//                   scale = max(max(-min, max) / ((2^b - 1) / 2), 2^-23),
//                   code = clamp(nearbyint(x * (1 / scale)), -2^(b-1), 2^(b-1) - 1)
//                   (signed8's formula with the range of b bits; b = 8 gives signed8's codes)
//   sign            +1 if x >= 0 else -1 (scale 1); gradient masked to |x| <= 1 (the clipped
//                   STE of BinaryNet / XNOR-Net)
// with d code / d x = 1 / scale inside the range (0 outside), as PyTorch's fake quantization.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mixp/tensor/tensor.h"

namespace mixp::quant {

// The weight format of one low-bit layer; binary_act also binarizes the layer's input.
enum class LowBitScheme : uint8_t { int8, int4, int2, ternary, binary, binary_act };

std::string_view name(LowBitScheme s);
// "int8", "int4", "int2", "ternary", "binary", "binary-act"; throws std::invalid_argument naming
// the choices.
LowBitScheme parse_lowbit_scheme(std::string_view s);
// Bits per stored weight code: 8, 4, 2, 2 (two bit-planes), 1, 1.
int weight_bits(LowBitScheme s);
// The code range of int8/int4/int2 ({-1, 1} for ternary and binary).
int32_t weight_qmin(LowBitScheme s);
int32_t weight_qmax(LowBitScheme s);

// Integer codes of `w` (fp32 values, w's shape) with the straight-through gradient of the header
// comment; `scales` receives one scale per output channel (w.size(0)). w: floating, rank >= 1.
Tensor lowbit_weight_codes(const Tensor& w, LowBitScheme scheme, std::vector<float>* scales);
// The same computation on raw data (no autograd): codes and per-channel scales of a row-major
// [O, K] weight. The reference the op and the packer use.
void lowbit_weight_codes_raw(const float* w, int64_t O, int64_t K, LowBitScheme scheme,
                             float* codes, float* scales, uint8_t* mask);

// signed_bits last: the packed model files store the kind's number (lowbit_io.cpp), and never
// hold signed_bits (only a Sequential is packed).
enum class ActCodeKind : uint8_t { unsigned_bits, signed8, sign, signed_bits };

struct ActCodeParams {
  ActCodeKind kind = ActCodeKind::unsigned_bits;
  int bits = 8;        // unsigned_bits: 1..8; signed_bits: 2..8
  float scale = 1.0f;  // from lowbit_act_scale (1 for sign)
  int32_t qmin() const;
  int32_t qmax() const;
};

// The scale of the header comment from observed min and max (any order of magnitude; min > max,
// nothing observed, gives 1).
float lowbit_act_scale(ActCodeKind kind, int bits, float min_val, float max_val);
// Codes of x with the straight-through gradient.
Tensor lowbit_act_codes(const Tensor& x, const ActCodeParams& p);

}  // namespace mixp::quant
