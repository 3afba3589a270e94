// fp32 -> any binary float format mixp stores (tf32, bf16, fp16, fp8 E4M3FN/E5M2) and back, for the
// CUDA kernels: the same algorithm as the one encoder, encode_float (src/format/float_codec.cpp,
// docs/formats.md), restricted to fp32 inputs so that it needs no double arithmetic, only integer
// operations. tests/cuda/test_cuda_math.cpp checks it bit for bit against encode_float for every
// format, rounding and overflow mode (fp32 inputs: normals, subnormals, ties, overflow, NaN).
#pragma once
#include <cstdint>
#include <cstring>

#include "backend/math/host_device.h"
#include "mixp/format/rounding.h"

namespace mixp::cuda_math {

// specials: 0 = IEEE (inf and NaN), 1 = FN (E4M3FN: no inf, S.1111.111 is NaN), 2 = finite.
struct MiniFormat {
  int exp_bits, man_bits, bias, specials;
};
// Functions, not constants: a namespace-scope constant passed by reference would not exist in
// device code.
MIXP_HD constexpr MiniFormat kTf32() { return {8, 10, 127, 0}; }
MIXP_HD constexpr MiniFormat kBf16() { return {8, 7, 127, 0}; }
MIXP_HD constexpr MiniFormat kFp16() { return {5, 10, 15, 0}; }
MIXP_HD constexpr MiniFormat kE4m3() { return {4, 3, 7, 1}; }
MIXP_HD constexpr MiniFormat kE5m2() { return {5, 2, 15, 0}; }

MIXP_HD uint32_t f32_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}
MIXP_HD float bits_f32(uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}
MIXP_HD int clz32(uint32_t x) {  // x != 0
  int n = 0;
  while (!(x & 0x80000000U)) {
    x <<= 1;
    ++n;
  }
  return n;
}

MIXP_HD uint32_t max_finite_bits(const MiniFormat& f) {
  const uint32_t all = (1U << (f.exp_bits + f.man_bits)) - 1;
  if (f.specials == 0) return all - (1U << f.man_bits);
  if (f.specials == 1) return all - 1;
  return all;
}

MIXP_HD uint32_t encode_overflow(const MiniFormat& f, uint32_t sign, Round round, Overflow ov) {
  const uint32_t exp_all = ((1U << f.exp_bits) - 1) << f.man_bits;
  if (ov == Overflow::saturate || f.specials == 2) return sign | max_finite_bits(f);
  if (round == Round::toward_zero) return sign | max_finite_bits(f);
  if (f.specials == 1) return sign | exp_all | ((1U << f.man_bits) - 1);
  return sign | exp_all;
}

// encode_float(f, x, round, overflow, random_bits) for an fp32 x: the format's bits.
MIXP_HD uint32_t encode_f32(const MiniFormat& f, float x, Round round, Overflow ov,
                            uint32_t random_bits) {
  const uint32_t u = f32_bits(x);
  const int M = f.man_bits;
  const uint32_t sign = (u >> 31) ? (1U << (f.exp_bits + M)) : 0;
  const uint32_t fexp = (u >> 23) & 0xFF;
  const uint32_t frac = u & 0x7FFFFF;
  const uint32_t exp_all = ((1U << f.exp_bits) - 1) << M;
  if (fexp == 0xFF) {
    if (frac != 0) {  // NaN: the top M payload bits with the quiet bit (IEEE formats)
      if (f.specials == 0) return sign | exp_all | (frac >> (23 - M)) | (1U << (M - 1));
      if (f.specials == 1) return sign | exp_all | ((1U << M) - 1);
      return 0;
    }
    return encode_overflow(f, sign, Round::nearest_even, ov);
  }
  if (fexp == 0 && frac == 0) return sign;
  // |x| = m * 2^(e - 23) with m in [2^23, 2^24).
  uint32_t m;
  int e;
  if (fexp == 0) {
    const int lz = clz32(frac) - 8;
    m = frac << lz;
    e = -126 - lz;
  } else {
    m = frac | (1U << 23);
    e = static_cast<int>(fexp) - 127;
  }
  const int emin = 1 - f.bias;
  int et = e > emin ? e : emin;
  const int shift = 23 - M + (et - e);  // >= 0 for every target format here
  uint64_t n;
  bool up = false;
  if (shift == 0) {
    n = m;
  } else if (shift >= 33) {  // everything dropped, and the dropped part is below half an ulp
    n = 0;
    const uint64_t frac32 = shift - 32 < 32 ? (uint64_t{m} >> (shift - 32)) : 0;
    up = round == Round::stochastic && frac32 + random_bits >= (uint64_t{1} << 32);
  } else {
    n = uint64_t{m} >> shift;
    const uint64_t rem = uint64_t{m} & ((uint64_t{1} << shift) - 1);
    const uint64_t half = uint64_t{1} << (shift - 1);
    const uint64_t frac32 = shift >= 32 ? (rem >> (shift - 32)) : (rem << (32 - shift));
    switch (round) {
      case Round::nearest_even: up = rem > half || (rem == half && (n & 1)); break;
      case Round::nearest_away: up = rem >= half; break;
      case Round::toward_zero: up = false; break;
      case Round::stochastic: up = frac32 + random_bits >= (uint64_t{1} << 32); break;
    }
  }
  n += up ? 1 : 0;
  if (n >> (M + 1)) {
    n >>= 1;
    et += 1;
  }
  uint64_t biased, mant;
  if (n < (uint64_t{1} << M)) {
    biased = 0;
    mant = n;
  } else {
    biased = static_cast<uint64_t>(et + f.bias);
    mant = n - (uint64_t{1} << M);
  }
  if (biased >= (uint64_t{1} << f.exp_bits) || ((biased << M) | mant) > max_finite_bits(f))
    return encode_overflow(f, sign, round, ov);
  if (n == 0) return sign;
  return sign | static_cast<uint32_t>((biased << M) | mant);
}

// The format's bits -> fp32 (exact: every value of these formats is an fp32; NaN keeps sign and
// payload, quiet, as decode_float).
MIXP_HD float decode_f32(const MiniFormat& f, uint32_t bits) {
  const int M = f.man_bits;
  const uint32_t exp_all = (1U << f.exp_bits) - 1;
  const uint32_t sign = (bits >> (f.exp_bits + M)) & 1U;
  const uint32_t ex = (bits >> M) & exp_all;
  const uint32_t mant = bits & ((1U << M) - 1);
  const bool is_nan = (f.specials == 0 && ex == exp_all && mant != 0) ||
                      (f.specials == 1 && ex == exp_all && mant == (1U << M) - 1);
  if (is_nan) return bits_f32((sign << 31) | 0x7FC00000U | (mant << (23 - M)));
  if (f.specials == 0 && ex == exp_all) return bits_f32((sign << 31) | 0x7F800000U);
  if (ex == 0) {
    if (mant == 0) return bits_f32(sign << 31);
    // Subnormal: mant * 2^(1 - bias - M), an exact fp32 product (bf16's are fp32 subnormals).
    const int e = 1 - f.bias - f.man_bits;  // >= -149 for every format here
    const float scale = e >= -126 ? bits_f32(static_cast<uint32_t>(e + 127) << 23)
                                  : bits_f32(1U << (e + 149));
    const float v = static_cast<float>(mant) * scale;
    return sign ? -v : v;
  }
  const int e = static_cast<int>(ex) - f.bias;
  return bits_f32((sign << 31) | (static_cast<uint32_t>(e + 127) << 23) | (mant << (23 - M)));
}

// tf32 is stored in fp32's layout (S.E8.M10 then 13 zero bits), as the cpu converters store it.
MIXP_HD float round_tf32(float x, Round round, Overflow ov, uint32_t random_bits) {
  const uint32_t b = encode_f32(kTf32(), x, round, ov, random_bits);
  return bits_f32(((b >> 18) << 31) | ((b & 0x3FFFF) << 13));
}

}  // namespace mixp::cuda_math
