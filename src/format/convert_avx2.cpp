// AVX2 + F16C bulk converters: the integer kernels of convert_simd_impl.h on 8 lanes, plus
// F16C's VCVTPS2PH / VCVTPH2PS for fp16 (bit-exact, see convert_avx512.cpp for the argument).
// Only reached through the dispatcher in convert.cpp after a CPU check. Every destination,
// rounding and overflow mode is covered: this tier never falls back to scalar.
//
// AVX2 has no unsigned compares and no mask registers: masks are all-ones lanes, the stochastic
// carry-out of frac + r is "min(sum, r) != r" (VPMINUD), and narrowing stores pack with
// VPACKUSDW / VPACKUSWB (values are already below 2^16 / 2^8, so the saturation never acts).
#include <immintrin.h>

#include "format/convert_kernels.h"
#include "format/convert_simd_impl.h"

namespace mixp::detail {
namespace {

struct V256 {
  using I = __m256i;
  using M = __m256i;
  static I set1(uint32_t v) { return _mm256_set1_epi32(static_cast<int>(v)); }
  static I iota() { return _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7); }
  static I add(I a, I b) { return _mm256_add_epi32(a, b); }
  static I sub(I a, I b) { return _mm256_sub_epi32(a, b); }
  static I and_(I a, I b) { return _mm256_and_si256(a, b); }
  static I or_(I a, I b) { return _mm256_or_si256(a, b); }
  static I xor_(I a, I b) { return _mm256_xor_si256(a, b); }
  template <int K>
  static I srli(I a) {
    return _mm256_srli_epi32(a, K);
  }
  template <int K>
  static I slli(I a) {
    return _mm256_slli_epi32(a, K);
  }
  static I srlv(I a, I c) { return _mm256_srlv_epi32(a, c); }  // counts > 31 give 0 (SDM VPSRLVD)
  static I sllv(I a, I c) { return _mm256_sllv_epi32(a, c); }
  static I min_u(I a, I b) { return _mm256_min_epu32(a, b); }
  static I max_s(I a, I b) { return _mm256_max_epi32(a, b); }
  static I mullo(I a, I b) { return _mm256_mullo_epi32(a, b); }
  static M gt_s(I a, I b) { return _mm256_cmpgt_epi32(a, b); }
  static M eq(I a, I b) { return _mm256_cmpeq_epi32(a, b); }
  static I select(M m, I if_false, I if_true) { return _mm256_blendv_epi8(if_false, if_true, m); }
  static bool any(M m) { return !_mm256_testz_si256(m, m); }
  // No embedded rounding in AVX2: every rounding is done with integers (MXCSR-independent).
  static constexpr bool kEmbeddedRounding = false;
  // n + carry-out of frac + r: no carry iff sum >= r iff min(sum, r) == r; n + 1 + (-1 or 0).
  static I add_carry(I n, I frac, I r) {
    const I no_carry = _mm256_cmpeq_epi32(_mm256_min_epu32(_mm256_add_epi32(frac, r), r), r);
    return _mm256_add_epi32(_mm256_add_epi32(n, set1(1)), no_carry);
  }
  static I int_to_float_scaled(I m, float s) {
    return _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(m), _mm256_set1_ps(s)));
  }
};
using I = __m256i;

// Vectors narrowed together per block: 2 (16-bit) or 4 (8-bit) are packed with the in-lane
// VPACKUSDW/VPACKUSWB (values already fit: no saturation) and put in order with one permute.
template <int OutBytes>
inline constexpr int kVecsPerBlock = OutBytes == 2 ? 2 : (OutBytes == 1 ? 4 : 1);

template <int OutBytes>
inline void store_block(unsigned char* d, const I* v) {
  if constexpr (OutBytes == 1) {
    const I b =
        _mm256_packus_epi16(_mm256_packus_epi32(v[0], v[1]), _mm256_packus_epi32(v[2], v[3]));
    // Dword 4L + j of b holds elements 4L..4L+3 of v[j].
    const I idx = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), _mm256_permutevar8x32_epi32(b, idx));
  } else if constexpr (OutBytes == 2) {
    const I p = _mm256_packus_epi32(v[0], v[1]);  // qword 2L + j: elements 4L..4L+3 of v[j]
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), _mm256_permute4x64_epi64(p, 0xD8));
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), v[0]);
  }
}

template <int InBytes>
inline I load_lanes(const unsigned char* s) {
  if constexpr (InBytes == 1) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s)));
  } else {
    return _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
  }
}

template <Fmt F, Round R>
struct NarrowInt {
  I ovf, inf;
  I lane_h;     // lane * 0x9E3779B9
  uint32_t h0;  // idx0 * 0x9E3779B9 + key
  static constexpr int kVecs = kVecsPerBlock<F.out_bytes>;
  void run(const unsigned char* s, unsigned char* d, size_t i) const {
    I v[kVecs];
    for (int k = 0; k < kVecs; ++k) {
      I r = _mm256_setzero_si256();
      if constexpr (R == Round::stochastic) {
        r = sr_lanes_pre<V256>(
            V256::add(V256::set1(h0 + static_cast<uint32_t>(i + 8 * k) * kSrGolden), lane_h));
      }
      const I u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 32 * k));
      v[k] = narrow_lanes<V256, F, R>(u, r, ovf, inf);
    }
    store_block<F.out_bytes>(d, v);
  }
};

// fp32 -> fp16 with VCVTPS2PH; Imm selects nearest-even or toward-zero. Saturation clamps |x|
// to 65504 (fp32 bits 0x477FE000) first, NaN lanes excepted.
template <int Imm>
struct Fp16Hw {
  bool saturate;
  void run(const unsigned char* s, unsigned char* d, size_t) const {
    I u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
    if (saturate) {
      const I a = _mm256_and_si256(u, V256::set1(0x7FFFFFFFU));
      const I nan = _mm256_cmpgt_epi32(a, V256::set1(0x7F800000U));
      const I c = _mm256_blendv_epi8(_mm256_min_epu32(a, V256::set1(0x477FE000U)), a, nan);
      u = _mm256_or_si256(c, _mm256_and_si256(u, V256::set1(0x80000000U)));
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d), _mm256_cvtps_ph(_mm256_castsi256_ps(u), Imm));
  }
};

template <Fmt F>
struct WidenInt {
  void run(const unsigned char* s, unsigned char* d, size_t) const {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d),
                        widen_lanes<V256, F>(load_lanes<F.out_bytes>(s)));
  }
};

struct Fp16WidenHw {
  void run(const unsigned char* s, unsigned char* d, size_t) const {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    _mm256_storeu_ps(reinterpret_cast<float*>(d), _mm256_cvtph_ps(h));
  }
};

template <Fmt F, Round R>
bool narrow_int(const NarrowArgs& a) {
  const NarrowInt<F, R> k{V256::set1(overflow_magnitude(F, R, a.overflow, false)),
                          V256::set1(overflow_magnitude(F, R, a.overflow, true)),
                          V256::mullo(V256::iota(), V256::set1(kSrGolden)),
                          a.idx0 * kSrGolden + a.key};
  drive<8 * kVecsPerBlock<F.out_bytes>, 4, F.out_bytes>(a.src, a.dst_bits, a.n, k);
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

bool narrow_avx2(const NarrowArgs& a) {
  const bool sat = a.overflow == Overflow::saturate;
  if (a.hardware && a.dst == DType::fp16 && a.round == Round::nearest_even) {
    drive<8, 4, 2>(a.src, a.dst_bits, a.n,
                   Fp16Hw<_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC>{sat});
    return true;
  }
  if (a.hardware && a.dst == DType::fp16 && a.round == Round::toward_zero) {
    drive<8, 4, 2>(a.src, a.dst_bits, a.n, Fp16Hw<_MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC>{sat});
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

bool widen_avx2(const WidenArgs& a) {
  switch (a.src) {
    case DType::bf16:
      drive<8, 2, 4>(a.src_bits, a.dst, a.n, WidenInt<kFmtBf16>{});
      return true;
    case DType::fp16:
      if (a.hardware) {
        drive<8, 2, 4>(a.src_bits, a.dst, a.n, Fp16WidenHw{});
      } else {
        drive<8, 2, 4>(a.src_bits, a.dst, a.n, WidenInt<kFmtFp16>{});
      }
      return true;
    case DType::fp8_e4m3:
      drive<8, 1, 4>(a.src_bits, a.dst, a.n, WidenInt<kFmtE4M3>{});
      return true;
    case DType::fp8_e5m2:
      drive<8, 1, 4>(a.src_bits, a.dst, a.n, WidenInt<kFmtE5M2>{});
      return true;
    default:
      return false;  // fp32, tf32: a copy, done by the dispatcher
  }
}

}  // namespace mixp::detail
