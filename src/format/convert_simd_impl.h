// Internal: the integer-bit-manipulation conversion algorithm shared by convert_avx2.cpp and
// convert_avx512.cpp, written once over a vector-ops type V that each of those files defines with
// its own intrinsics. Include it ONLY from an arch file (*_avx2.cpp / *_avx512.cpp).
//
// Everything here sits in an anonymous namespace on purpose: each arch file compiles it with
// different -m flags, and an inline function with external linkage would be merged across the two
// files (and the baseline ones) by the linker, so an AVX-512 copy could end up running on an AVX2
// machine. For the same reason the arch files call no inline function of the public headers
// at run time (constant expressions, such as the static_asserts below, are fine).
//
// The algorithm, per 32-bit lane holding fp32 bits u (docs/formats.md; encode_float is the oracle):
//   a = |u|. Target format: M mantissa bits, bias B, d0 = 23 - M dropped bits when the result is
//   normal.
//   * Result normal in the target (a >= the target's min normal): x = a - ((127 - B) << 23)
//     re-biases the exponent; the result's magnitude bits are round(x / 2^d0), and a rounding
//     carry walks into the exponent by itself (the classic bf16 trick, docs/formats.md).
//   * Result subnormal (or zero): x = the significand with its implicit bit, d = the lane's own
//     shift (151 - B - M - max(E, 1)), rounded with variable shifts (VPSRLVD/VPSLLVD give 0 for
//     counts >= 32, Intel SDM, which is exactly the value the rounding needs). A result that
//     rounds up to 2^M is the min normal's bit pattern, again by itself.
//     For bf16 and tf32 (B = 127) both cases are the same shift and only the first one is needed.
//   * Rounding of x by d bits: toward_zero x >> d; nearest_even (x + 2^(d-1) - 1 + lsb) >> d;
//     nearest_away (x + 2^(d-1)) >> d; stochastic: up iff floor(f * 2^32) + r >= 2^32, with
//     floor(f * 2^32) = (x << (32 - d)) | (x >> (d - 32)) (one of the two shifts is out of range
//     and gives 0), i.e. the carry out of a 32-bit add. For d <= 32 that is "add the top d bits of
//     r to x and truncate" (float_codec.h), which the normal case uses directly.
//   * Finite overflow: magnitude > max finite bits -> the mode's overflow value; inf and NaN
//     inputs are blended in last. NaN: sign kept, quiet bit set, top M payload bits kept.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "mixp/format/float_codec.h"
#include "mixp/format/rounding.h"

namespace mixp::detail {
namespace {  // NOLINT(cert-dcl59-cpp,google-build-namespaces): see the header comment

// A destination format as compile-time constants. out_bytes: 1, 2, or 4 (fp32 layout: tf32, fp32).
struct Fmt {
  int man_bits;
  int exp_bits;
  int bias;
  Specials specials;
  int out_bytes;
  constexpr int d0() const { return 23 - man_bits; }
  // Computed here rather than by FloatFormat::max_finite_bits (an inline function with external
  // linkage, see the header comment); the static_asserts below check that they agree.
  constexpr uint32_t max_bits() const {
    const uint32_t all = (1U << (exp_bits + man_bits)) - 1;
    if (specials == Specials::ieee) return all - (1U << man_bits);
    return specials == Specials::fn ? all - 1 : all;
  }
  constexpr uint32_t exp_all() const { return ((1U << exp_bits) - 1) << man_bits; }
  constexpr uint32_t mant_mask() const { return (1U << man_bits) - 1; }
};

inline constexpr Fmt kFmtBf16{7, 8, 127, Specials::ieee, 2};
inline constexpr Fmt kFmtFp16{10, 5, 15, Specials::ieee, 2};
inline constexpr Fmt kFmtE4M3{3, 4, 7, Specials::fn, 1};
inline constexpr Fmt kFmtE5M2{2, 5, 15, Specials::ieee, 1};
inline constexpr Fmt kFmtTf32{10, 8, 127, Specials::ieee, 4};
inline constexpr Fmt kFmtFp32{23, 8, 127, Specials::ieee, 4};
static_assert(kFmtBf16.max_bits() == kBf16.max_finite_bits() &&
              kFmtFp16.max_bits() == kFp16.max_finite_bits() &&
              kFmtE4M3.max_bits() == kFp8E4M3.max_finite_bits() &&
              kFmtE5M2.max_bits() == kFp8E5M2.max_finite_bits() &&
              kFmtTf32.max_bits() == kTf32.max_finite_bits() &&
              kFmtFp32.max_bits() == kFp32.max_finite_bits());

// Magnitude bits for a finite overflow and for an infinite input (encode_float's
// encode_overflow; an infinite input is rounded as nearest_even there, so toward_zero keeps inf).
constexpr uint32_t overflow_magnitude(const Fmt& f, Round r, Overflow o, bool infinite_input) {
  if (o == Overflow::saturate) return f.max_bits();
  // IEEE 754 7.4: truncation never leaves the finite range, E4M3FN included (docs/formats.md).
  if (r == Round::toward_zero && !infinite_input) return f.max_bits();
  if (f.specials == Specials::fn) return f.exp_all() | f.mant_mask();  // E4M3FN: NaN
  return f.exp_all();                                                  // inf
}

// Random bits of the lanes: sr_bits_with_key(key, index) = mix32(index * 0x9E3779B9 + key)
// (rounding.h), from h = index * 0x9E3779B9 + key. The kernels step h by W * 0x9E3779B9 per
// block of W lanes instead of multiplying the index each time. sr_lanes_pre stops before mix32's
// last step x ^= x >> 16, which leaves the top 16 bits unchanged: a kernel that needs only the
// top D <= 16 bits of r takes them from the "pre" value and skips two instructions.
inline constexpr uint32_t kSrGolden = 0x9E3779B9U;
template <class V>
inline typename V::I sr_lanes_pre(typename V::I h) {
  using I = typename V::I;
  I x = V::xor_(h, V::template srli<16>(h));
  x = V::mullo(x, V::set1(0x7feb352dU));
  x = V::xor_(x, V::template srli<15>(x));
  return V::mullo(x, V::set1(0x846ca68bU));
}
template <class V>
inline typename V::I sr_finish(typename V::I pre) {
  return V::xor_(pre, V::template srli<16>(pre));
}

// round(x / 2^D) for a compile-time D in [1, 31]. rp: the random bits before sr_finish.
template <class V, Round R, int D>
inline typename V::I round_const(typename V::I x, typename V::I rp) {
  if constexpr (R == Round::toward_zero) {
    return V::template srli<D>(x);
  } else if constexpr (R == Round::nearest_even) {
    const auto lsb = V::and_(V::template srli<D>(x), V::set1(1));
    return V::template srli<D>(V::add(V::add(x, V::set1((1U << (D - 1)) - 1)), lsb));
  } else if constexpr (R == Round::nearest_away) {
    return V::template srli<D>(V::add(x, V::set1(1U << (D - 1))));
  } else {
    const auto r = D <= 16 ? rp : sr_finish<V>(rp);  // top D bits of r (see sr_lanes_pre)
    return V::template srli<D>(V::add(x, V::template srli<32 - D>(r)));
  }
}

// round(x / 2^d) for per-lane d >= 1 and x < 2^24 (subnormal results).
template <class V, Round R>
inline typename V::I round_var(typename V::I x, typename V::I d, typename V::I r) {
  using I = typename V::I;
  if constexpr (R == Round::toward_zero) {
    return V::srlv(x, d);
  } else if constexpr (R == Round::stochastic) {
    const I frac32 = V::or_(V::sllv(x, V::sub(V::set1(32), d)), V::srlv(x, V::sub(d, V::set1(32))));
    return V::add_carry(V::srlv(x, d), frac32, r);
  } else {
    // Shifting by 31 already gives 0 for x < 2^24, and keeps 2^(d-1) inside 32 bits.
    const I dc = V::min_u(d, V::set1(31));
    const I half = V::sllv(V::set1(1), V::sub(dc, V::set1(1)));
    if constexpr (R == Round::nearest_away) return V::srlv(V::add(x, half), dc);
    const I lsb = V::and_(V::srlv(x, dc), V::set1(1));
    return V::srlv(V::add(V::add(x, V::sub(half, V::set1(1))), lsb), dc);
  }
}

// fp32 bits -> destination bits (low out_bytes*8 bits of each lane; fp32 layout for tf32/fp32).
// rp: sr_lanes_pre of the lanes (stochastic only); ovf / inf: overflow_magnitude(..., false /
// true) broadcast.
template <class V, Fmt F, Round R>
inline typename V::I narrow_lanes(typename V::I u, typename V::I rp, typename V::I ovf,
                                  typename V::I inf) {
  using I = typename V::I;
  const I r = sr_finish<V>(rp);  // dead code unless a subnormal path below needs all 32 bits
  constexpr int M = F.man_bits;
  constexpr int B = F.bias;
  constexpr int D0 = F.d0();
  const I a = V::and_(u, V::set1(0x7FFFFFFFU));
  I n;
  if constexpr (D0 == 0) {
    n = a;  // fp32 -> fp32: exact
  } else if constexpr (B == 127) {
    n = round_const<V, R, D0>(a, rp);  // fp32 denormals are the target's subnormals, same shift
  } else {
    const I xn = V::sub(a, V::set1(static_cast<uint32_t>(127 - B) << 23));
    const I nn = round_const<V, R, D0>(xn, rp);
    I ns;
    if constexpr (V::kEmbeddedRounding && (R == Round::nearest_even || R == Round::toward_zero)) {
      // |x| + 2^(emin - M + 23) lies in a binade whose fp32 ulp is the target's subnormal ulp
      // 2^(emin - M), so the sum's low bits are the rounded result (FP16 libraries' magic-number
      // trick). EVEX embedded rounding fixes the direction and suppresses exceptions whatever
      // the MXCSR; DAZ could only zero fp32 denormals, which round to 0 here anyway.
      constexpr uint32_t kMagic = static_cast<uint32_t>(1 - B - M + 23 + 127) << 23;
      ns = V::sub(V::template add_round_f32<R>(a, V::set1(kMagic)), V::set1(kMagic));
    } else if constexpr (V::kEmbeddedRounding && R == Round::stochastic) {
      // The same sum truncated gives t = floor(|x| / ulp); the remainder |x| - t * ulp is exact
      // in fp32 (both are multiples of |x|'s own ulp and the difference is below |x|), and
      // scaling it by 2^32 / ulp is exact, so VCVTTPS2UDQ yields floor(f * 2^32) (float_codec.h).
      // DAZ/FTZ could only zero values whose floor(f * 2^32) is 0 anyway.
      constexpr uint32_t kMagic = static_cast<uint32_t>(1 - B - M + 23 + 127) << 23;
      constexpr uint32_t kScale = static_cast<uint32_t>(32 - (1 - B - M) + 127) << 23;  // 2^32/ulp
      const I s = V::template add_round_f32<Round::toward_zero>(a, V::set1(kMagic));
      const I t = V::sub(s, V::set1(kMagic));
      const I rem = V::sub_f32(a, V::sub_f32(s, V::set1(kMagic)));
      ns = V::add_carry(t, V::mul_f32_to_u32_trunc(rem, V::set1(kScale)), r);
    } else {
      const I e = V::template srli<23>(a);
      const I sig =
          V::or_(V::and_(a, V::set1(0x7FFFFF)), V::template slli<23>(V::min_u(e, V::set1(1))));
      const I d = V::sub(V::set1(151 - B - M), V::max_s(e, V::set1(1)));
      ns = round_var<V, R>(sig, d, r);
    }
    const auto is_normal = V::gt_s(a, V::set1((static_cast<uint32_t>(128 - B) << 23) - 1));
    n = V::select(is_normal, ns, nn);
  }
  I mag = V::select(V::gt_s(n, V::set1(F.max_bits())), n, ovf);
  const auto special = V::gt_s(a, V::set1(0x7F7FFFFFU));
  if (V::any(special)) {
    I nan;
    if constexpr (F.specials == Specials::fn) {
      nan = V::set1(F.exp_all() | F.mant_mask());
    } else {
      nan = V::or_(V::and_(V::template srli<D0>(a), V::set1(F.mant_mask())),
                   V::set1(F.exp_all() | (1U << (M - 1))));
    }
    const I spec = V::select(V::gt_s(a, V::set1(0x7F800000U)), inf, nan);
    mag = V::select(special, mag, spec);
  }
  if constexpr (F.out_bytes == 4) {
    return V::or_(V::template slli<D0>(mag), V::and_(u, V::set1(0x80000000U)));
  } else {
    constexpr int kSignShift = 32 - 8 * F.out_bytes;
    return V::or_(mag, V::and_(V::template srli<kSignShift>(u), V::set1(1U << (31 - kSignShift))));
  }
}

// Destination bits (zero-extended into 32-bit lanes) -> fp32 bits, exactly as decode_float.
template <class V, Fmt F>
inline typename V::I widen_lanes(typename V::I b) {
  using I = typename V::I;
  constexpr int M = F.man_bits;
  constexpr int B = F.bias;
  constexpr int D0 = F.d0();
  constexpr int kBits = 8 * F.out_bytes;
  if constexpr (B == 127) {
    static_assert(kBits == 16, "tf32 and fp32 sources are copies, not kernels");
    // bf16 is the top half of an fp32, subnormals included: shift, then quiet the NaNs.
    const I v = V::template slli<16>(b);
    const auto nan = V::gt_s(V::and_(v, V::set1(0x7FFFFFFFU)), V::set1(0x7F800000U));
    return V::select(nan, v, V::or_(v, V::set1(0x00400000U)));
  } else {
    const I sign = V::template slli<32 - kBits>(V::and_(b, V::set1(1U << (kBits - 1))));
    const I mag = V::and_(b, V::set1((1U << (kBits - 1)) - 1));
    const I normal =
        V::add(V::template slli<D0>(mag), V::set1(static_cast<uint32_t>(127 - B) << 23));
    // Subnormal mantissa m: m * 2^(1 - B - M), a normal fp32; both steps exact whatever the MXCSR.
    const I sub = V::int_to_float_scaled(mag, static_cast<float>(1.0 / (1ULL << (B + M - 1))));
    I v = V::select(V::gt_s(V::set1(1U << M), mag), normal, sub);
    if constexpr (F.specials == Specials::fn) {
      v = V::select(V::eq(mag, V::set1(F.exp_all() | F.mant_mask())), v, V::set1(0x7FF00000U));
    } else {
      const auto special = V::gt_s(mag, V::set1(F.exp_all() - 1));
      const I quiet =
          V::select(V::gt_s(mag, V::set1(F.exp_all())), V::set1(0), V::set1(0x00400000U));
      const I payload = V::template slli<D0>(V::and_(mag, V::set1(F.mant_mask())));
      v = V::select(special, v, V::or_(V::or_(V::set1(0x7F800000U), payload), quiet));
    }
    return V::or_(v, sign);
  }
}

// Drives a block kernel over n elements: full blocks of W, then one block through a zeroed stack
// buffer for the tail (so every element goes through the same code). K::run(src, dst, index_of_
// first) converts exactly W elements.
template <int W, int InBytes, int OutBytes, class K>
inline void drive(const void* src, void* dst, size_t n, const K& k) {
  const auto* s = static_cast<const unsigned char*>(src);
  auto* d = static_cast<unsigned char*>(dst);
  size_t i = 0;
  for (; i + W <= n; i += W) k.run(s + i * InBytes, d + i * OutBytes, i);
  if (i < n) {
    alignas(64) unsigned char in[W * InBytes] = {};
    alignas(64) unsigned char out[W * OutBytes];
    std::memcpy(in, s + i * InBytes, (n - i) * InBytes);
    k.run(in, out, i);
    std::memcpy(d + i * OutBytes, out, (n - i) * OutBytes);
  }
}

}  // namespace
}  // namespace mixp::detail
