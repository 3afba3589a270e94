// The one generic encoder/decoder behind every binary floating-point format mixp stores
// (fp32 down to fp4). Value types (minifloat.h), the bulk converters' scalar path and the block
// formats all call these; docs/formats.md is the specification they follow.
//
// Encoding takes a double because every fp32 is exactly a double, and because `mixp formats`
// parses decimal input to double: rounding straight from the double avoids double rounding.
//
// Stochastic rounding, exactly: let f in [0, 1) be the part of |x| below the target's ulp,
// in ulps, and r the 32 random bits. Round up iff floor(f * 2^32) + r >= 2^32. For fp32 inputs
// whose dropped part has at most 32 bits (every target here, normal results) this is exactly
// unbiased, and it equals "add the top d bits of r to the d dropped bits and truncate" (CPFloat,
// qtorch), which is how the SIMD kernels do it.
#pragma once
#include <cstdint>

#include "mixp/format/rounding.h"

namespace mixp {

// Which special values a format encodes.
enum class Specials : uint8_t {
  ieee,    // exponent all ones: mantissa 0 is inf, else NaN (fp16, bf16, tf32, fp8_e5m2)
  fn,      // no inf; only S.1111.111 is NaN (OCP E4M3FN)
  finite,  // no inf, no NaN: every pattern is a number (MX fp6/fp4 elements)
};

struct FloatFormat {
  int exp_bits;
  int man_bits;
  int bias;
  Specials specials;
  // Bit count including the sign; sign bit; bits of the largest finite magnitude.
  constexpr int bits() const { return 1 + exp_bits + man_bits; }
  constexpr uint32_t sign_mask() const { return 1U << (exp_bits + man_bits); }
  constexpr uint32_t max_finite_bits() const {
    const uint32_t all = (1U << (exp_bits + man_bits)) - 1;
    switch (specials) {
      case Specials::ieee: return all - (1U << man_bits);  // exponent field max-1, mantissa all ones
      case Specials::fn: return all - 1;                                              // S.1111.110
      case Specials::finite: return all;
    }
    return all;
  }
};

inline constexpr FloatFormat kFp32{8, 23, 127, Specials::ieee};
inline constexpr FloatFormat kTf32{8, 10, 127, Specials::ieee};
inline constexpr FloatFormat kBf16{8, 7, 127, Specials::ieee};
inline constexpr FloatFormat kFp16{5, 10, 15, Specials::ieee};
inline constexpr FloatFormat kFp8E4M3{4, 3, 7, Specials::fn};
inline constexpr FloatFormat kFp8E5M2{5, 2, 15, Specials::ieee};
inline constexpr FloatFormat kFp6E2M3{2, 3, 1, Specials::finite};
inline constexpr FloatFormat kFp6E3M2{3, 2, 3, Specials::finite};
inline constexpr FloatFormat kFp4E2M1{2, 1, 1, Specials::finite};

// Encodes x into `fmt`'s bits (sign at bit fmt.bits()-1, the rest zero). `random_bits` is used only
// by Round::stochastic. NaN keeps its sign, is made quiet and keeps the top payload bits that fit;
// in formats without NaN (fp6, fp4) it encodes as +0 with status nan (the MX block encoder marks
// the block NaN through its scale). `status` may be null.
uint32_t encode_float(const FloatFormat& fmt, double x, Round round, Overflow overflow,
                      uint32_t random_bits, ConvertStatus* status);

// Exact value of the bits (every format here is exactly representable in double, and in fp32
// except fp64 itself).
double decode_float(const FloatFormat& fmt, uint32_t bits);

}  // namespace mixp
