// Bulk converters between fp32 spans and the element-wise storage formats: bf16, fp16, fp8 E4M3,
// fp8 E5M2, tf32 (an fp32 with the low 13 mantissa bits zero) and fp32 itself. This is the fast
// path of docs/architecture.md 3.2 ("Bulk converters over spans are the fast path; the scalar one
// is their reference"): SIMD kernels (AVX-512, AVX2+F16C) chosen at run time by simd_tier(), each
// one bit-identical to the scalar reference for every input and every rounding/overflow mode.
//
// Semantics, element by element, are exactly mixp::encode_float / decode_float (float_codec.h,
// docs/formats.md): rounding and overflow are named in ConvertOptions; NaN keeps its
// sign, is made quiet and keeps the top payload bits that fit; the result never depends on the
// MXCSR (rounding mode, FTZ, DAZ) of the calling thread.
//
// Coverage: on the AVX-512 and AVX2 tiers every destination x rounding (nearest_even,
// toward_zero, stochastic, nearest_away) x overflow combination has a SIMD kernel, as has
// widening from bf16, fp16 and the fp8s; widening from tf32/fp32 is a memmove. Only the scalar
// tier (no AVX2+F16C, or MIXP_CPU_TIER=scalar) runs the scalar reference.
//
// Block formats (fp6_e2m3, fp6_e3m2, fp4_e2m1 with their e8m0 scales, int8/uint8/int4/nf4) need a
// per-block scale and are not element-wise conversions: these functions reject them with
// std::invalid_argument naming the block API to use instead, mixp::quantize_block /
// dequantize_block (mixp/format/block_tensor.h) and the scheme.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "mixp/format/dtype.h"
#include "mixp/format/minifloat.h"
#include "mixp/format/rounding.h"

namespace mixp {

struct ConvertOptions {
  Round round;        // always named (docs/architecture.md 6.2): no default
  Overflow overflow;  // always named
  // Round::stochastic only: element i of the span uses sr_bits(seed, offset + i) (rounding.h), so
  // converting a tensor in chunks (offset = the chunk's first index) gives the same bits as one
  // call, whatever the chunking, the SIMD tier or the thread that runs each chunk.
  uint64_t seed = 0;
  uint64_t offset = 0;
};

// True for the formats these converters handle: fp32, tf32, bf16, fp16, fp8_e4m3, fp8_e5m2.
bool is_elementwise_float(DType t);

// Narrows src into dst_bits, which holds src.size() elements of `dst`'s storage: uint16_t for
// bf16/fp16, uint8_t for fp8, fp32 bit patterns (float) for tf32 and fp32. No alignment is
// required. dst_bits must not overlap src, except exactly in place (dst_bits == src.data()) for
// the 4-byte destinations tf32 and fp32. fp32 -> fp32 is a copy that quiets signalling NaNs and,
// under Overflow::saturate, clamps +-inf to +-max finite (what encode_float does).
void convert_f32_to(DType dst, std::span<const float> src, void* dst_bits,
                    const ConvertOptions& opt);

// Widens src_bits (dst.size() elements of `src`'s storage) exactly into fp32. Signalling NaNs come
// back quiet with their sign and payload (IEEE 754 convertFormat, decode_float). tf32 and fp32
// sources are copied bit for bit (they already are fp32 bit patterns).
void convert_to_f32(DType src, const void* src_bits, std::span<float> dst);

// The scalar references, always available: one encode_float / decode_float call per element.
// The SIMD paths are tested against these bit for bit.
void convert_f32_to_reference(DType dst, std::span<const float> src, void* dst_bits,
                              const ConvertOptions& opt);
void convert_to_f32_reference(DType src, const void* src_bits, std::span<float> dst);

// Typed helpers over the value types of minifloat.h. Sizes must match (std::invalid_argument).
template <class T>
concept ElementwiseFloat = std::is_same_v<T, half> || std::is_same_v<T, bfloat16> ||
    std::is_same_v<T, float8_e4m3> || std::is_same_v<T, float8_e5m2> || std::is_same_v<T, tfloat32>;

namespace detail {
void check_convert_sizes(size_t src, size_t dst);
}

template <ElementwiseFloat T>
void convert(std::span<const float> src, std::span<T> dst, const ConvertOptions& opt) {
  detail::check_convert_sizes(src.size(), dst.size());
  convert_f32_to(dtype_of_v<T>, src, dst.data(), opt);
}

template <ElementwiseFloat T>
void convert(std::span<const T> src, std::span<float> dst) {
  detail::check_convert_sizes(src.size(), dst.size());
  convert_to_f32(dtype_of_v<T>, src.data(), dst);
}

}  // namespace mixp
