// OCP Microscaling (MX v1.0) block formats: MXFP8 (E4M3, E5M2), MXFP6 (E2M3, E3M2), MXFP4 (E2M1)
// and MXINT8. A block of `block_size` (default 32) consecutive values along the LAST dimension of
// a tensor shares one E8M0 scale X = 2^shared; element i stores P_i = x_i / X in the element
// format, and decodes as P_i * X (OCP MX v1.0 sections 5 and 6.3;
// docs/formats.md "OCP Microscaling").
//
// Shared exponent (OCP MX v1.0 6.3, as microxcaling's _shared_exponents computes it):
//   shared = floor(log2(amax)) - emax_elem, clamped to [-127, 127]
//   emax_elem: E4M3 8, E5M2 15, E2M3 2, E3M2 4, E2M1 2, INT8 0.
// floor(log2(amax)) is read from amax's fp32 exponent field (or, for an fp32 subnormal, from the
// position of its leading one), so it is exact; a float log2 rounds up just below powers of two.
//  - amax == 0: floor(log2(.)) is taken as -126, the fp32 min normal's exponent (microxcaling adds
//    FP32_MIN_NORMAL to zero blocks). The scale is then 2^max(-126 - emax, -127): 2^-127 (bits
//    0x00) for every FP element type and 2^-126 (bits 0x01) for MXINT8. All elements are +-0.
//  - Any NaN or +-inf in a block: the scale is 0xFF (NaN) and every element of the block decodes
//    to NaN (OCP: a NaN scale makes the whole block NaN). The element bits are stored as 0.
//  - The largest element can land above the element's max finite after scaling (amax's mantissa
//    > the element's largest mantissa, e.g. 7.9 in MXFP4 becomes 7.9/2^(2-2) -> saturates to 6):
//    elements always convert with Overflow::saturate, as the spec prescribes.
//
// Elements (value of code c, sign included):
//   fp8_e4m3  OCP E4M3FN, max 448          fp8_e5m2  OCP E5M2, max 57344
//   fp6_e2m3  S EE MMM bias 1, max 7.5     fp6_e3m2  S EEE MM bias 3, max 28
//   fp4_e2m1  S EE M   bias 1, max 6
//   int8      MXINT8: two's complement q, value q * 2^-6 (fixed point 1.6, emax 0). Encoding
//             clamps q to [-127, 127] (symmetric, as microxcaling's max_norm 127/64); decoding
//             also accepts -128 (= -2.0), a valid two's complement code.
// Rounding: any Round mode; nearest_even is the default (ties to even, unlike microxcaling's
// "nearest", which ties away). Stochastic rounding draws element i's 32 bits from
// sr_bits(seed, i), i the element's flat index in the tensor, so results are reproducible.
//
// Packing of `data` (flat element index i over the whole tensor, row-major):
//   8-bit elements: byte i.
//   fp6: byte i, code in the low 6 bits, top 2 bits zero. (OCP leaves the memory layout of FP6
//        to implementations; one per byte keeps random access and matches how fp6 values are
//        held unpacked in ml_dtypes/PyTorch. Dense 3-bytes-per-4 packing is a future option.)
//   fp4: two per byte, element 2i in the LOW nibble (bits 3..0), element 2i+1 in the high nibble,
//        as PyTorch's Float4_e2m1fn_x2 documents ("val1 : val0" = bits 7654 : 3210) and NVIDIA's
//        __nv_fp4x2 stores it. A tensor with an odd element count ends in a half-filled byte.
// `scales`: one e8m0 byte per block, blocks ordered row-major: for a tensor of R rows of length
// K (K = last dimension, R = numel / K), row r holds ceil(K / block_size) blocks, the last one
// partial when K is not a multiple of block_size (blocks never span rows).
#pragma once
#include <cstdint>
#include <span>
#include <string_view>

#include "mixp/format/dtype.h"
#include "mixp/format/minifloat.h"
#include "mixp/format/rounding.h"

namespace mixp {

enum class MxElement : uint8_t { fp8_e4m3, fp8_e5m2, fp6_e2m3, fp6_e3m2, fp4_e2m1, int8 };

inline constexpr int kMxDefaultBlock = 32;

struct MxElementInfo {
  MxElement element;
  DType dtype;            // registry dtype of the element (int8 for MXINT8)
  std::string_view name;  // "mxfp8_e4m3", ...
  int bits;               // significant bits of one code: 8, 6 or 4
  int emax;               // exponent of the largest power of two the element represents
  double max_finite;      // 448, 57344, 7.5, 28, 6, 127/64
};

const MxElementInfo& mx_info(MxElement e);

// Shared exponent of a block, as above. `amax_bits` is the fp32 bit pattern of max |x| (sign
// cleared); returns 0xFF (NaN) for inf/NaN amax.
e8m0 mx_shared_scale(uint32_t amax_bits, MxElement e);
// Same, scanning a block of values for its amax (and any NaN/inf).
e8m0 mx_shared_scale(std::span<const float> block, MxElement e);

// One element: `scaled` = x / 2^shared (finite); returns the element code (Overflow::saturate).
uint32_t mx_encode_element(MxElement e, double scaled, Round round, uint32_t random_bits);
// Exact value of an element code (before the block scale).
double mx_decode_element(MxElement e, uint32_t code);

// Number of blocks and packed data bytes for `n` elements in rows of `row_len`.
int64_t mx_num_blocks(int64_t n, int64_t row_len, int block_size);
int64_t mx_data_bytes(MxElement e, int64_t n);

struct MxOptions {
  int block_size = kMxDefaultBlock;
  Round round = Round::nearest_even;
  uint64_t seed = 0;  // stochastic rounding only
};

// Quantizes x (rows of `row_len` values; row_len = last dimension, 1 for a scalar) into packed
// `data` (mx_data_bytes) and e8m0 `scales` (mx_num_blocks). Throws std::invalid_argument on bad
// sizes (the message names the expected ones).
void mx_quantize(std::span<uint8_t> data, std::span<uint8_t> scales, std::span<const float> x,
                 int64_t row_len, MxElement e, const MxOptions& opt);
// Decodes to fp32: code value * 2^shared, rounded once to fp32 (exact unless the product lands
// below fp32's normal range), NaN for blocks with scale 0xFF.
void mx_dequantize(std::span<float> out, std::span<const uint8_t> data,
                   std::span<const uint8_t> scales, int64_t row_len, MxElement e, int block_size);
// Quantize + dequantize in place (what training's fake quantization needs); identical results to
// mx_quantize followed by mx_dequantize, without the packed buffers.
void mx_fake_quantize(std::span<float> x, int64_t row_len, MxElement e, const MxOptions& opt);

}  // namespace mixp
