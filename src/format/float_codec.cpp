// Generic binary-float encoder/decoder; see include/mixp/format/float_codec.h and docs/formats.md.
#include "mixp/format/float_codec.h"

#include <bit>
#include <cmath>

namespace mixp {
namespace {

constexpr uint64_t kDoubleFracMask = (uint64_t{1} << 52) - 1;

uint32_t encode_nan(const FloatFormat& fmt, uint32_t sign, uint64_t double_frac) {
  const int M = fmt.man_bits;
  const uint32_t exp_all = ((1U << fmt.exp_bits) - 1) << M;
  switch (fmt.specials) {
    case Specials::ieee: {
      // Keep the top M payload bits, force the quiet bit (the mantissa's MSB).
      const uint32_t payload = static_cast<uint32_t>(double_frac >> (52 - M));
      return sign | exp_all | payload | (1U << (M - 1));
    }
    case Specials::fn:
      return sign | exp_all | ((1U << M) - 1);
    case Specials::finite:
      return 0;
  }
  return 0;
}

// Result for a magnitude that does not fit (finite overflow or an infinite input).
uint32_t encode_overflow(const FloatFormat& fmt, uint32_t sign, Round round, Overflow overflow) {
  const int M = fmt.man_bits;
  const uint32_t exp_all = ((1U << fmt.exp_bits) - 1) << M;
  if (overflow == Overflow::saturate || fmt.specials == Specials::finite) {
    return sign | fmt.max_finite_bits();
  }
  // IEEE 754 7.4: roundTowardZero carries overflow to the largest finite number. This comes
  // before E4M3FN's NaN: truncation never leaves the finite range (docs/formats.md, Overflow).
  if (round == Round::toward_zero) return sign | fmt.max_finite_bits();
  if (fmt.specials == Specials::fn) return sign | exp_all | ((1U << M) - 1);  // E4M3FN: NaN
  return sign | exp_all;  // inf
}

}  // namespace

uint32_t encode_float(const FloatFormat& fmt, double x, Round round, Overflow overflow,
                      uint32_t random_bits, ConvertStatus* status) {
  ConvertStatus st_local;
  ConvertStatus& st = status ? *status : st_local;
  const uint64_t u = std::bit_cast<uint64_t>(x);
  const uint32_t sign = (u >> 63) ? fmt.sign_mask() : 0;
  const int M = fmt.man_bits;
  const uint32_t dexp = static_cast<uint32_t>((u >> 52) & 0x7FF);
  const uint64_t frac = u & kDoubleFracMask;

  if (dexp == 0x7FF) {
    if (frac != 0) {
      st = ConvertStatus::nan;
      return encode_nan(fmt, sign, frac);
    }
    st = ConvertStatus::overflow;  // an infinite input: exact only where inf exists and is kept
    if (fmt.specials == Specials::ieee && overflow == Overflow::ieee) st = ConvertStatus::exact;
    // Infinity is not "overflow by rounding", so toward_zero does not turn it into max finite.
    return encode_overflow(fmt, sign, Round::nearest_even, overflow);
  }
  if (dexp == 0 && frac == 0) {
    st = ConvertStatus::exact;
    return sign;
  }

  // |x| = m * 2^(e - 52) with m in [2^52, 2^53).
  uint64_t m;
  int e;
  if (dexp == 0) {
    const int lz = std::countl_zero(frac) - 11;
    m = frac << lz;
    e = -1022 - lz;
  } else {
    m = frac | (uint64_t{1} << 52);
    e = static_cast<int>(dexp) - 1023;
  }
  const int emin = 1 - fmt.bias;
  int et = e > emin ? e : emin;
  // value / 2^(et - M) = m >> shift, shift >= 52 - M >= 29 for every format here.
  const int shift = 52 - M + (et - e);

  uint64_t n;
  uint64_t frac32;  // floor(dropped fraction * 2^32)
  bool rem_nonzero;
  bool up;
  if (shift >= 64) {
    n = 0;
    frac32 = (shift - 32 < 64) ? (m >> (shift - 32)) : 0;
    rem_nonzero = true;
    // The dropped fraction is below 2^53 / 2^64 < 1/2: nearest modes round down.
    up = (round == Round::stochastic) && (frac32 + random_bits >= (uint64_t{1} << 32));
  } else {
    n = m >> shift;
    const uint64_t rem = m & ((uint64_t{1} << shift) - 1);
    const uint64_t half = uint64_t{1} << (shift - 1);
    frac32 = shift >= 32 ? (rem >> (shift - 32)) : (rem << (32 - shift));
    rem_nonzero = rem != 0;
    switch (round) {
      case Round::nearest_even: up = rem > half || (rem == half && (n & 1)); break;
      case Round::nearest_away: up = rem >= half; break;
      case Round::toward_zero: up = false; break;
      case Round::stochastic: up = frac32 + random_bits >= (uint64_t{1} << 32); break;
      default: up = false;
    }
  }
  n += up ? 1 : 0;
  if (n >> (M + 1)) {  // rounding carried into the next binade (n == 2^(M+1) exactly)
    n >>= 1;
    et += 1;
  }

  uint64_t biased;
  uint64_t mant;
  if (n < (uint64_t{1} << M)) {  // subnormal (et == emin) or zero
    biased = 0;
    mant = n;
  } else {
    biased = static_cast<uint64_t>(et + fmt.bias);
    mant = n - (uint64_t{1} << M);
  }
  if (biased >= (uint64_t{1} << fmt.exp_bits) || ((biased << M) | mant) > fmt.max_finite_bits()) {
    st = ConvertStatus::overflow;
    return encode_overflow(fmt, sign, round, overflow);
  }
  if (n == 0) {
    st = ConvertStatus::underflow;
    return sign;
  }
  st = rem_nonzero ? ConvertStatus::inexact : ConvertStatus::exact;
  return sign | static_cast<uint32_t>((biased << M) | mant);
}

double decode_float(const FloatFormat& fmt, uint32_t bits) {
  const int M = fmt.man_bits;
  const uint32_t exp_all = (1U << fmt.exp_bits) - 1;
  const bool neg = (bits & fmt.sign_mask()) != 0;
  const uint32_t exp = (bits >> M) & exp_all;
  const uint32_t mant = bits & ((1U << M) - 1);
  const bool is_nan = (fmt.specials == Specials::ieee && exp == exp_all && mant != 0) ||
                      (fmt.specials == Specials::fn && exp == exp_all && mant == (1U << M) - 1);
  if (is_nan) {
    // Keep sign and payload when widening (numpy, ml_dtypes do the same).
    const uint64_t d = (uint64_t{neg} << 63) | (uint64_t{0x7FF} << 52) |
                       (static_cast<uint64_t>(mant) << (52 - M)) | (uint64_t{1} << 51);
    return std::bit_cast<double>(d);
  }
  if (fmt.specials == Specials::ieee && exp == exp_all) {
    return neg ? -HUGE_VAL : HUGE_VAL;
  }
  const int emin = 1 - fmt.bias;
  const double v = exp == 0 ? std::ldexp(static_cast<double>(mant), emin - M)
                            : std::ldexp(static_cast<double>(mant | (1U << M)),
                                         static_cast<int>(exp) - fmt.bias - M);
  return neg ? -v : v;
}

}  // namespace mixp
