#include "mixp/tensor/element.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "mixp/format/minifloat.h"

namespace mixp {
namespace {

template <class T>
T ld(const void* base, int64_t i) {
  T v;
  std::memcpy(&v, static_cast<const char*>(base) + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return v;
}
template <class T>
void st(void* base, int64_t i, T v) {
  std::memcpy(static_cast<char*>(base) + i * static_cast<int64_t>(sizeof(T)), &v, sizeof(T));
}

// Rounds v to an integer as named, then saturates to [lo, hi]; NaN gives 0.
double round_integer(double v, double lo, double hi, Round round, uint32_t random_bits) {
  if (std::isnan(v)) return 0.0;
  double r;
  switch (round) {
    case Round::nearest_even:
      r = std::nearbyint(v);
      break;  // default FP env: ties to even
    case Round::toward_zero:
      r = std::trunc(v);
      break;
    case Round::nearest_away:
      r = std::round(v);
      break;
    case Round::stochastic: {
      const double fl = std::floor(v);
      const double frac = v - fl;  // in [0, 1)
      const double scaled = std::floor(std::ldexp(frac, 32));
      r = (scaled + static_cast<double>(random_bits) >= 4294967296.0) ? fl + 1 : fl;
      break;
    }
    default:
      r = std::nearbyint(v);
  }
  return std::fmin(std::fmax(r, lo), hi);
}

[[noreturn]] void unsupported(DType dt, const char* what) {
  throw std::invalid_argument(
      std::string("mixp: ") + what + " of dtype " + std::string(name(dt)) +
      " is not supported element-wise (it needs its block scale or codebook; "
      "use the quant module)");
}

}  // namespace

double load_element(const void* base, DType dt, int64_t i) {
  switch (dt) {
    case DType::fp64:
      return ld<double>(base, i);
    case DType::fp32:
      return ld<float>(base, i);
    case DType::tf32:
      return ld<float>(base, i);
    case DType::bf16:
      return std::bit_cast<float>(static_cast<uint32_t>(ld<uint16_t>(base, i)) << 16);
    case DType::fp16:
      return decode_float(kFp16, ld<uint16_t>(base, i));
    case DType::fp8_e4m3:
      return decode_float(kFp8E4M3, ld<uint8_t>(base, i));
    case DType::fp8_e5m2:
      return decode_float(kFp8E5M2, ld<uint8_t>(base, i));
    case DType::fp6_e2m3:
      return decode_float(kFp6E2M3, ld<uint8_t>(base, i) & 0x3F);
    case DType::fp6_e3m2:
      return decode_float(kFp6E3M2, ld<uint8_t>(base, i) & 0x3F);
    case DType::fp4_e2m1:
      return decode_float(kFp4E2M1, ld<uint8_t>(base, i) & 0x0F);
    case DType::e8m0:
      return e8m0{ld<uint8_t>(base, i)}.to_float();
    case DType::int8:
      return ld<int8_t>(base, i);
    case DType::uint8:
      return ld<uint8_t>(base, i);
    case DType::int4:
      return ld<int8_t>(base, i);  // unpacked: one value in [-8, 7] per byte
    case DType::nf4:
      unsupported(dt, "reading");
    case DType::int32:
      return ld<int32_t>(base, i);
    case DType::int64:
      return static_cast<double>(ld<int64_t>(base, i));
    case DType::boolean:
      return ld<uint8_t>(base, i) != 0 ? 1.0 : 0.0;
  }
  return 0.0;
}

void store_element(void* base, DType dt, int64_t i, double v, Round round, Overflow overflow,
                   uint32_t random_bits) {
  switch (dt) {
    case DType::fp64:
      st<double>(base, i, v);
      return;
    case DType::fp32:
      st<uint32_t>(base, i, encode_float(kFp32, v, round, overflow, random_bits, nullptr));
      return;
    case DType::tf32: {
      const uint32_t b = encode_float(kTf32, v, round, overflow, random_bits, nullptr);
      st<uint32_t>(base, i, ((b >> 18) << 31) | ((b & 0x3FFFF) << 13));
      return;
    }
    case DType::bf16:
      st<uint16_t>(
          base, i,
          static_cast<uint16_t>(encode_float(kBf16, v, round, overflow, random_bits, nullptr)));
      return;
    case DType::fp16:
      st<uint16_t>(
          base, i,
          static_cast<uint16_t>(encode_float(kFp16, v, round, overflow, random_bits, nullptr)));
      return;
    case DType::fp8_e4m3:
      st<uint8_t>(
          base, i,
          static_cast<uint8_t>(encode_float(kFp8E4M3, v, round, overflow, random_bits, nullptr)));
      return;
    case DType::fp8_e5m2:
      st<uint8_t>(
          base, i,
          static_cast<uint8_t>(encode_float(kFp8E5M2, v, round, overflow, random_bits, nullptr)));
      return;
    case DType::fp6_e2m3:
      st<uint8_t>(
          base, i,
          static_cast<uint8_t>(encode_float(kFp6E2M3, v, round, overflow, random_bits, nullptr)));
      return;
    case DType::fp6_e3m2:
      st<uint8_t>(
          base, i,
          static_cast<uint8_t>(encode_float(kFp6E3M2, v, round, overflow, random_bits, nullptr)));
      return;
    case DType::fp4_e2m1:
      st<uint8_t>(
          base, i,
          static_cast<uint8_t>(encode_float(kFp4E2M1, v, round, overflow, random_bits, nullptr)));
      return;
    case DType::e8m0:
      unsupported(dt, "writing");
    case DType::nf4:
      unsupported(dt, "writing");
    case DType::int8:
      st<int8_t>(base, i, static_cast<int8_t>(round_integer(v, -128, 127, round, random_bits)));
      return;
    case DType::uint8:
      st<uint8_t>(base, i, static_cast<uint8_t>(round_integer(v, 0, 255, round, random_bits)));
      return;
    case DType::int4:
      st<int8_t>(base, i, static_cast<int8_t>(round_integer(v, -8, 7, round, random_bits)));
      return;
    case DType::int32:
      st<int32_t>(
          base, i,
          static_cast<int32_t>(round_integer(v, -2147483648.0, 2147483647.0, round, random_bits)));
      return;
    case DType::int64: {
      // 2^63 is not an int64; clamp just below it.
      const double r =
          round_integer(v, -9223372036854775808.0, 9223372036854774784.0, round, random_bits);
      st<int64_t>(base, i, static_cast<int64_t>(r));
      return;
    }
    case DType::boolean:
      st<uint8_t>(base, i, v != 0.0 ? 1 : 0);
      return;
  }
}

bool is_exact_conversion(DType from, DType to) {
  if (from == to) return true;
  const DTypeTraits& f = traits(from);
  const DTypeTraits& t = traits(to);
  if (to == DType::fp64) return from != DType::int64 && from != DType::nf4;
  if (from == DType::boolean) return to != DType::nf4 && to != DType::e8m0;
  if (t.kind != DKind::floating) {
    if (f.kind != DKind::integer || t.kind != DKind::integer) return false;
    // integer -> wider integer of compatible signedness
    if (f.is_signed && !t.is_signed) return false;
    return t.bits > f.bits || (t.bits == f.bits && f.is_signed == t.is_signed);
  }
  if (to == DType::tf32) return false;  // tf32 is a compute format; converting to it rounds
  if (f.kind == DKind::floating) {
    // exponent range and precision both at least as large
    return t.man_bits >= f.man_bits && t.max_finite >= f.max_finite &&
           t.min_subnormal <= f.min_subnormal;
  }
  if (f.kind == DKind::integer) {
    // every integer up to the format's range has to fit in the significand
    const int int_bits = f.is_signed ? f.bits - 1 : f.bits;
    return t.man_bits + 1 >= int_bits;
  }
  return false;
}

}  // namespace mixp
