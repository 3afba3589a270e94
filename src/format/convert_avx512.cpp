// AVX-512 (F/BW/VL/DQ, + BF16 where present) bulk converters: the integer kernels of
// convert_simd_impl.h on 16 lanes, plus hardware conversions where they are bit-exact after
// fix-ups. Only reached through the dispatcher in convert.cpp after a CPU check.
//
// Hardware instructions used, and why they match encode_float exactly (Intel SDM vol. 2):
//  * VCVTNE2PS2BF16 (fp32 -> bf16, round to nearest even, no MXCSR): its pseudo-code rounds with
//    "+ 0x7FFF + lsb" like docs/formats.md, makes NaNs quiet keeping the top payload bits (as
//    mixp), and overflows to inf; but it treats DENORMAL INPUTS AS ZERO, while mixp rounds them to
//    bf16 subnormals. A block of 32 that holds an fp32 denormal goes through the integer kernel.
//    Overflow::saturate is obtained by clamping |x| to bf16's max (0x7F7F0000) first: everything
//    above it rounds to max or overflows, both of which saturate to max.
//  * VCVTPS2PH (fp32 -> fp16) with the rounding in imm8 (not MXCSR.RC; FTZ is ignored and
//    subnormal results are produced): nearest-even and toward-zero overflow as IEEE 754 says
//    (inf, resp. max finite), NaNs are quieted with the top payload bits kept. fp32 denormals
//    become +-0 in fp16 under every mode, so DAZ cannot change a result. Saturation: clamp
//    |x| to 65504 first.
//  * VCVTPH2PS (fp16 -> fp32) is exact, quiets signalling NaNs keeping the payload, as
//    decode_float.
// Everything else (stochastic, nearest_away, fp8, tf32, fp32) uses the integer kernels of
// convert_simd_impl.h, whose subnormal results use EVEX embedded rounding here (VADDPS with
// {rn-sae}/{rz-sae}: the direction comes from the instruction, not from MXCSR.RC). They cover
// every destination, rounding and overflow mode, so this tier never falls back to scalar.
// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm512_undefined_epi32()
// (GCC bug 105593, fixed in GCC 13); the warning says nothing about this file.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "format/convert_kernels.h"
#include "format/convert_simd_impl.h"

namespace mixp::detail {
namespace {

struct V512 {
  using I = __m512i;
  using M = __mmask16;
  static I set1(uint32_t v) { return _mm512_set1_epi32(static_cast<int>(v)); }
  static I iota() {
    return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  }
  static I add(I a, I b) { return _mm512_add_epi32(a, b); }
  static I sub(I a, I b) { return _mm512_sub_epi32(a, b); }
  static I and_(I a, I b) { return _mm512_and_si512(a, b); }
  static I or_(I a, I b) { return _mm512_or_si512(a, b); }
  static I xor_(I a, I b) { return _mm512_xor_si512(a, b); }
  template <int K>
  static I srli(I a) {
    return _mm512_srli_epi32(a, K);
  }
  template <int K>
  static I slli(I a) {
    return _mm512_slli_epi32(a, K);
  }
  static I srlv(I a, I c) { return _mm512_srlv_epi32(a, c); }  // counts > 31 give 0 (SDM VPSRLVD)
  static I sllv(I a, I c) { return _mm512_sllv_epi32(a, c); }
  static I min_u(I a, I b) { return _mm512_min_epu32(a, b); }
  static I max_s(I a, I b) { return _mm512_max_epi32(a, b); }
  static I mullo(I a, I b) { return _mm512_mullo_epi32(a, b); }
  static M gt_s(I a, I b) { return _mm512_cmpgt_epi32_mask(a, b); }
  static M eq(I a, I b) { return _mm512_cmpeq_epi32_mask(a, b); }
  static I select(M m, I if_false, I if_true) {
    return _mm512_mask_blend_epi32(m, if_false, if_true);
  }
  static bool any(M m) { return m != 0; }
  // fp32 add with EVEX embedded rounding (round-to-nearest-even or toward zero, {sae}): the
  // direction comes from the instruction, not MXCSR.RC (Intel SDM 2.7.4).
  static constexpr bool kEmbeddedRounding = true;
  template <Round R>
  static I add_round_f32(I a, I b) {
    constexpr int kRc = (R == Round::toward_zero ? _MM_FROUND_TO_ZERO : _MM_FROUND_TO_NEAREST_INT) |
                        _MM_FROUND_NO_EXC;
    return _mm512_castps_si512(
        _mm512_add_round_ps(_mm512_castsi512_ps(a), _mm512_castsi512_ps(b), kRc));
  }
  // Exact fp32 operations (callers guarantee it), exceptions suppressed.
  static I sub_f32(I a, I b) {
    return _mm512_castps_si512(_mm512_sub_round_ps(_mm512_castsi512_ps(a), _mm512_castsi512_ps(b),
                                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  static I mul_f32_to_u32_trunc(I a, I b) {
    const __m512 p = _mm512_mul_round_ps(_mm512_castsi512_ps(a), _mm512_castsi512_ps(b),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm512_cvtt_roundps_epu32(p, _MM_FROUND_NO_EXC);
  }
  // n + carry-out of the 32-bit sum frac + r.
  static I add_carry(I n, I frac, I r) {
    const M carry = _mm512_cmplt_epu32_mask(_mm512_add_epi32(frac, r), r);
    return _mm512_mask_add_epi32(n, carry, n, set1(1));
  }
  static I int_to_float_scaled(I m, float s) {
    return _mm512_castps_si512(_mm512_mul_ps(_mm512_cvtepi32_ps(m), _mm512_set1_ps(s)));
  }
};
using I = __m512i;

// Vectors narrowed together per block: VPMOVDW/VPMOVDB cost two uops each and were the
// bottleneck of the cheap kernels, so 2 (16-bit) or 4 (8-bit) vectors are packed with the
// in-lane VPACKUSDW/VPACKUSWB (values already fit: no saturation) and put in order with one
// permute.
template <int OutBytes>
inline constexpr int kVecsPerBlock = OutBytes == 2 ? 2 : (OutBytes == 1 ? 4 : 1);

template <int OutBytes>
inline void store_block(unsigned char* d, const I* v) {
  if constexpr (OutBytes == 1) {
    const I b =
        _mm512_packus_epi16(_mm512_packus_epi32(v[0], v[1]), _mm512_packus_epi32(v[2], v[3]));
    // Dword 4L + j of b holds elements 4L..4L+3 of v[j]: transpose the 4 x 4 dword grid.
    const I idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_storeu_si512(d, _mm512_permutexvar_epi32(idx, b));
  } else if constexpr (OutBytes == 2) {
    // Qword 2L + j holds elements 4L..4L+3 of v[j].
    const I p = _mm512_packus_epi32(v[0], v[1]);
    _mm512_storeu_si512(d, _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7), p));
  } else {
    _mm512_storeu_si512(d, v[0]);
  }
}

template <int InBytes>
inline I load_lanes(const unsigned char* s) {
  if constexpr (InBytes == 1) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
  } else if constexpr (InBytes == 2) {
    return _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)));
  } else {
    return _mm512_loadu_si512(s);
  }
}

template <Fmt F, Round R>
struct NarrowInt {
  I ovf, inf;
  I lane_h;     // lane * 0x9E3779B9
  uint32_t h0;  // idx0 * 0x9E3779B9 + key
  I convert(I u, size_t i) const {
    I r = _mm512_setzero_si512();
    if constexpr (R == Round::stochastic) {
      r = sr_lanes_pre<V512>(
          V512::add(V512::set1(h0 + static_cast<uint32_t>(i) * kSrGolden), lane_h));
    }
    return narrow_lanes<V512, F, R>(u, r, ovf, inf);
  }
  static constexpr int kVecs = kVecsPerBlock<F.out_bytes>;
  void run(const unsigned char* s, unsigned char* d, size_t i) const {
    I v[kVecs];
    for (int k = 0; k < kVecs; ++k) v[k] = convert(_mm512_loadu_si512(s + 64 * k), i + 16 * k);
    store_block<F.out_bytes>(d, v);
  }
};

template <Fmt F, Round R>
NarrowInt<F, R> make_int(const NarrowArgs& a) {
  return {V512::set1(overflow_magnitude(F, R, a.overflow, false)),
          V512::set1(overflow_magnitude(F, R, a.overflow, true)),
          V512::mullo(V512::iota(), V512::set1(kSrGolden)), a.idx0 * kSrGolden + a.key};
}

// |u| clamped to max_bits (fp32 bits of the format's max finite) except for NaN lanes.
inline I clamp_magnitude(I u, uint32_t max_bits) {
  const I a = _mm512_and_si512(u, V512::set1(0x7FFFFFFFU));
  const __mmask16 not_nan = _mm512_cmple_epu32_mask(a, V512::set1(0x7F800000U));
  const I c = _mm512_mask_min_epu32(a, not_nan, a, V512::set1(max_bits));
  return _mm512_or_si512(c, _mm512_and_si512(u, V512::set1(0x80000000U)));
}

// fp32 -> bf16, nearest even, 32 elements per VCVTNE2PS2BF16.
struct Bf16Hw {
  NarrowInt<kFmtBf16, Round::nearest_even> fallback;
  bool saturate;
  void run(const unsigned char* s, unsigned char* d, size_t i) const {
    I u0 = _mm512_loadu_si512(s);
    I u1 = _mm512_loadu_si512(s + 64);
    // Denormal input: |u| - 1 < 0x7FFFFF (zero wraps around and is excluded).
    const I one = V512::set1(1), lim = V512::set1(0x7FFFFF), abs = V512::set1(0x7FFFFFFFU);
    const __mmask16 den0 =
        _mm512_cmplt_epu32_mask(_mm512_sub_epi32(_mm512_and_si512(u0, abs), one), lim);
    const __mmask16 den1 =
        _mm512_cmplt_epu32_mask(_mm512_sub_epi32(_mm512_and_si512(u1, abs), one), lim);
    if ((den0 | den1) != 0) {
      const I v[2] = {fallback.convert(u0, i), fallback.convert(u1, i + 16)};
      store_block<2>(d, v);
      return;
    }
    if (saturate) {
      u0 = clamp_magnitude(u0, 0x7F7F0000U);
      u1 = clamp_magnitude(u1, 0x7F7F0000U);
    }
    const __m512bh h = _mm512_cvtne2ps_pbh(_mm512_castsi512_ps(u1), _mm512_castsi512_ps(u0));
    _mm512_storeu_si512(d, (__m512i)h);  // same-size vector cast (GCC)
  }
};

// fp32 -> fp16 with VCVTPS2PH; Imm selects nearest-even or toward-zero.
template <int Imm>
struct Fp16Hw {
  bool saturate;
  void run(const unsigned char* s, unsigned char* d, size_t) const {
    I u = _mm512_loadu_si512(s);
    if (saturate) u = clamp_magnitude(u, 0x477FE000U);  // 65504.0f
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d),
                        _mm512_cvtps_ph(_mm512_castsi512_ps(u), Imm));
  }
};

template <Fmt F>
struct WidenInt {
  void run(const unsigned char* s, unsigned char* d, size_t) const {
    _mm512_storeu_si512(d, widen_lanes<V512, F>(load_lanes<F.out_bytes>(s)));
  }
};

struct Fp16WidenHw {
  void run(const unsigned char* s, unsigned char* d, size_t) const {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
    _mm512_storeu_ps(reinterpret_cast<float*>(d), _mm512_cvtph_ps(h));
  }
};

template <Fmt F, Round R>
bool narrow_int(const NarrowArgs& a) {
  drive<16 * kVecsPerBlock<F.out_bytes>, 4, F.out_bytes>(a.src, a.dst_bits, a.n, make_int<F, R>(a));
  return true;
}

template <Fmt F>
bool narrow_fmt(const NarrowArgs& a) {
  switch (a.round) {
    case Round::nearest_even:
      return narrow_int<F, Round::nearest_even>(a);
    case Round::toward_zero:
      return narrow_int<F, Round::toward_zero>(a);
    case Round::stochastic:
      return narrow_int<F, Round::stochastic>(a);
    case Round::nearest_away:
      return narrow_int<F, Round::nearest_away>(a);
  }
  return false;
}

}  // namespace

bool narrow_avx512(const NarrowArgs& a) {
  const bool sat = a.overflow == Overflow::saturate;
  if (a.hardware && a.dst == DType::bf16 && a.round == Round::nearest_even && a.avx512_bf16) {
    drive<32, 4, 2>(a.src, a.dst_bits, a.n,
                    Bf16Hw{make_int<kFmtBf16, Round::nearest_even>(a), sat});
    return true;
  }
  if (a.hardware && a.dst == DType::fp16 && a.round == Round::nearest_even) {
    drive<16, 4, 2>(a.src, a.dst_bits, a.n,
                    Fp16Hw<_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC>{sat});
    return true;
  }
  if (a.hardware && a.dst == DType::fp16 && a.round == Round::toward_zero) {
    drive<16, 4, 2>(a.src, a.dst_bits, a.n, Fp16Hw<_MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC>{sat});
    return true;
  }
  switch (a.dst) {
    case DType::bf16:
      return narrow_fmt<kFmtBf16>(a);
    case DType::fp16:
      return narrow_fmt<kFmtFp16>(a);
    case DType::fp8_e4m3:
      return narrow_fmt<kFmtE4M3>(a);
    case DType::fp8_e5m2:
      return narrow_fmt<kFmtE5M2>(a);
    case DType::tf32:
      return narrow_fmt<kFmtTf32>(a);
    case DType::fp32:
      return narrow_fmt<kFmtFp32>(a);
    default:
      return false;
  }
}

bool widen_avx512(const WidenArgs& a) {
  switch (a.src) {
    case DType::bf16:
      drive<16, 2, 4>(a.src_bits, a.dst, a.n, WidenInt<kFmtBf16>{});
      return true;
    case DType::fp16:
      if (a.hardware) {
        drive<16, 2, 4>(a.src_bits, a.dst, a.n, Fp16WidenHw{});
      } else {
        drive<16, 2, 4>(a.src_bits, a.dst, a.n, WidenInt<kFmtFp16>{});
      }
      return true;
    case DType::fp8_e4m3:
      drive<16, 1, 4>(a.src_bits, a.dst, a.n, WidenInt<kFmtE4M3>{});
      return true;
    case DType::fp8_e5m2:
      drive<16, 1, 4>(a.src_bits, a.dst, a.n, WidenInt<kFmtE5M2>{});
      return true;
    default:
      return false;  // fp32, tf32: a copy, done by the dispatcher
  }
}

}  // namespace mixp::detail
