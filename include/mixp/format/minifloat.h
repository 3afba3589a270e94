// Value types for every binary floating-point format below fp32. One template
// (docs/architecture.md 6.1, after cutlass's float_exmy and ml_dtypes' float8_base): a trivially
// copyable struct over the bits.
//
//   half (fp16)        S EEEEE MMMMMMMMMM          bias 15, inf + NaN (IEEE binary16)
//   bfloat16           S EEEEEEEE MMMMMMM          bias 127, inf + NaN
//   float8_e4m3 (FN)   S EEEE MMM                  bias 7, no inf, NaN = S.1111.111, max 448
//   float8_e5m2        S EEEEE MM                  bias 15, inf + NaN, max 57344
//   float6_e2m3        S EE MMM   (in the low 6 bits of a byte)   bias 1, finite only, max 7.5
//   float6_e3m2        S EEE MM   (low 6 bits)                    bias 3, finite only, max 28
//   float4_e2m1        S EE M     (low 4 bits)                    bias 1, finite only, max 6
//   tfloat32           fp32 layout with the low 13 mantissa bits zero (1-8-10)
//   e8m0               EEEEEEEE: 2^(E-127), 0xFF is NaN, no sign, no zero (MX block scale)
//
// Narrowing always names its rounding and overflow (docs/architecture.md 6.2); widening to
// float is exact.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "mixp/format/dtype.h"
#include "mixp/format/float_codec.h"

namespace mixp {

template <FloatFormat F>
struct Minifloat {
  using storage_type = std::conditional_t<(F.bits() > 8), uint16_t, uint8_t>;
  static constexpr FloatFormat format = F;

  storage_type bits;

  static constexpr Minifloat from_bits(uint32_t b) {
    return Minifloat{static_cast<storage_type>(b)};
  }
  // `random_bits` is only read by Round::stochastic (see float_codec.h for the exact rule).
  static Minifloat from_float(float x, Round round, Overflow overflow, uint32_t random_bits = 0,
                              ConvertStatus* status = nullptr) {
    return from_bits(encode_float(F, x, round, overflow, random_bits, status));
  }
  static Minifloat from_double(double x, Round round, Overflow overflow, uint32_t random_bits = 0,
                               ConvertStatus* status = nullptr) {
    return from_bits(encode_float(F, x, round, overflow, random_bits, status));
  }
  float to_float() const { return static_cast<float>(decode_float(F, bits)); }
  explicit operator float() const { return to_float(); }

  bool is_nan() const { return std::isnan(to_float()); }
  friend constexpr bool operator==(Minifloat a, Minifloat b) { return a.bits == b.bits; }
};

// bf16 and fp16 widen with plain bit arithmetic: these two sit on hot paths (ref backend loops).
// NaNs are made quiet, as decode_float and the bulk converters do (one behaviour everywhere).
template <>
inline float Minifloat<kBf16>::to_float() const {
  uint32_t b = bits;
  if ((b & 0x7F80U) == 0x7F80U && (b & 0x7FU) != 0) b |= 0x40U;
  return std::bit_cast<float>(b << 16);
}

using half = Minifloat<kFp16>;
using bfloat16 = Minifloat<kBf16>;
using float8_e4m3 = Minifloat<kFp8E4M3>;
using float8_e5m2 = Minifloat<kFp8E5M2>;
using float6_e2m3 = Minifloat<kFp6E2M3>;
using float6_e3m2 = Minifloat<kFp6E3M2>;
using float4_e2m1 = Minifloat<kFp4E2M1>;

static_assert(sizeof(half) == 2 && sizeof(bfloat16) == 2 && sizeof(float8_e4m3) == 1);
static_assert(std::is_trivially_copyable_v<half> && std::is_trivially_copyable_v<float8_e5m2>);

// TF32 as tensor cores read it: an fp32 whose low 13 mantissa bits are zero.
struct tfloat32 {
  uint32_t bits;
  static tfloat32 from_float(float x, Round round, Overflow overflow, uint32_t random_bits = 0,
                             ConvertStatus* status = nullptr) {
    const uint32_t b = encode_float(kTf32, x, round, overflow, random_bits, status);
    // 19-bit pattern S.E8.M10 -> fp32 layout.
    return tfloat32{((b >> 18) << 31) | ((b & 0x3FFFF) << 13)};
  }
  float to_float() const { return std::bit_cast<float>(bits); }
  explicit operator float() const { return to_float(); }
};

// MX shared scale: 2^(bits - 127); 0xFF is NaN (OCP MX v1.0 section 5.4).
struct e8m0 {
  uint8_t bits;
  static constexpr int kBias = 127;
  static constexpr uint8_t kNaN = 0xFF;
  // Clamps the exponent to the encodable range [-127, 127].
  static constexpr e8m0 from_exponent(int e) {
    e = e < -127 ? -127 : (e > 127 ? 127 : e);
    return e8m0{static_cast<uint8_t>(e + kBias)};
  }
  constexpr bool is_nan() const { return bits == kNaN; }
  constexpr int exponent() const { return static_cast<int>(bits) - kBias; }
  float to_float() const {
    return is_nan() ? std::bit_cast<float>(0x7FC00000U)
                    : static_cast<float>(std::ldexp(1.0, exponent()));
  }
};

template <> struct dtype_of<half> { static constexpr DType value = DType::fp16; };
template <> struct dtype_of<bfloat16> { static constexpr DType value = DType::bf16; };
template <> struct dtype_of<float8_e4m3> { static constexpr DType value = DType::fp8_e4m3; };
template <> struct dtype_of<float8_e5m2> { static constexpr DType value = DType::fp8_e5m2; };
template <> struct dtype_of<float6_e2m3> { static constexpr DType value = DType::fp6_e2m3; };
template <> struct dtype_of<float6_e3m2> { static constexpr DType value = DType::fp6_e3m2; };
template <> struct dtype_of<float4_e2m1> { static constexpr DType value = DType::fp4_e2m1; };
template <> struct dtype_of<tfloat32> { static constexpr DType value = DType::tf32; };
template <> struct dtype_of<e8m0> { static constexpr DType value = DType::e8m0; };

}  // namespace mixp
