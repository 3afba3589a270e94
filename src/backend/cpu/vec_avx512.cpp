// The avx512 tier of the vectorized row kernels (see vec_kernels.h), plus hand-written AVX-512
// GELU kernels that replace the generic loops of vec_kernels.inc for this tier.
#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/vec_kernels.h"

// GCC 12's avx512fintrin.h trips a false -Wmaybe-uninitialized on its own _mm512_undefined_ps()
// (the pass-through operand of the unmasked min/max/roundscale/scalef forms).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace mixp::vec::avx512 {
namespace {

// exp(x) for x in [-100, 100] (callers clamp): x = k ln2 + r, |r| <= ln2/2, exp(r) by the same
// Cephes polynomial as vec_kernels.inc's fexp, 2^k applied by VSCALEFPS, which rounds to 0 below
// the subnormal range and gives +inf above fp32's range (no exponent-bit arithmetic to overflow).
inline __m512 exp_ps(__m512 x) {
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4f), r);
  const __m512 r2 = _mm512_mul_ps(r, r);
  __m512 p = _mm512_set1_ps(1.9875691500E-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507E-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073E-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894E-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459E-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201E-1f));
  p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, k);
}

// exp(-2u), u = sqrt(2/pi) (x + 0.044715 x^3), the argument clamped to [-100, 100] (beyond that
// the result is 0 or +inf either way; the clamp keeps the range reduction exact).
inline __m512 gelu_e(__m512 x, __m512 x2) {
  const __m512 a = _mm512_set1_ps(-2.0f * 0.7978845608028654f);
  const __m512 b = _mm512_set1_ps(-2.0f * 0.7978845608028654f * 0.044715f);
  __m512 u2 = _mm512_mul_ps(x, _mm512_fmadd_ps(b, x2, a));
  u2 = _mm512_min_ps(_mm512_max_ps(u2, _mm512_set1_ps(-100.0f)), _mm512_set1_ps(100.0f));
  return exp_ps(u2);
}

// gelu(v) = v / (1 + exp(-2u)) (the sigmoid form of the tanh approximation; see fgelu in
// vec_kernels.inc for why and for the accuracy).
inline __m512 gelu_ps(__m512 v) {
  const __m512 e = gelu_e(v, _mm512_mul_ps(v, v));
  return _mm512_div_ps(v, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

// g * gelu'(v) = g (s + 2 v u'(v) e s^2), s = 1 / (1 + e) (see fgelu_grad in vec_kernels.inc);
// e capped at FLT_MAX so that e s stays finite in the far left tail.
inline __m512 gelu_grad_ps(__m512 v, __m512 gv) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 c1 = _mm512_set1_ps(2.0f * 0.7978845608028654f);
  const __m512 c3 = _mm512_set1_ps(2.0f * 0.7978845608028654f * 3.0f * 0.044715f);
  const __m512 v2 = _mm512_mul_ps(v, v);
  const __m512 e = _mm512_min_ps(gelu_e(v, v2), _mm512_set1_ps(3.40282347e38f));
  const __m512 s = _mm512_div_ps(one, _mm512_add_ps(one, e));
  const __m512 t = _mm512_mul_ps(v, _mm512_fmadd_ps(c3, v2, c1));  // 2 v u'(v)
  const __m512 d = _mm512_fmadd_ps(_mm512_mul_ps(t, _mm512_mul_ps(e, s)), s, s);
  return _mm512_mul_ps(gv, d);
}

inline __mmask16 tail_mask(int64_t left) {
  return left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1u);
}

// 16 bf16 values (bits) -> fp32: the top half of an fp32 (exact; NaNs stay NaN and arithmetic
// quiets them, as the widening converter does).
inline __m512 load_bf16(__mmask16 m, const uint16_t* p) {
  const __m256i b = m == 0xFFFF ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))
                                : _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
}
// fp32 -> bf16, nearest even, overflow to inf, NaN: sign, quiet bit and top payload bits kept
// (the narrowing converter's rules, convert_simd_impl.h); subnormals round like normals (bf16
// has fp32's exponent range).
inline void store_bf16(uint16_t* p, __mmask16 m, __m512 y) {
  const __m512i bits = _mm512_castps_si512(y);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(y, y, _CMP_UNORD_Q);
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x0040));
  const __m512i out = _mm512_mask_blend_epi32(nan, rounded, quiet);
  const __m256i h = _mm512_cvtepi32_epi16(out);
  if (m == 0xFFFF) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), h);
  } else {
    _mm256_mask_storeu_epi16(p, m, h);
  }
}

// Full vectors with plain loads and stores (masked ones in every iteration cost measurably on
// this CPU), the tail masked.
void gelu_fwd_rows(float* y, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, gelu_ps(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, m, gelu_ps(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

void gelu_bwd_rows(float* gi, const float* g, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(gi + i, gelu_grad_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(g + i)));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(
        gi + i, m, gelu_grad_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, g + i)));
  }
}

void gelu_bf16_rows(uint16_t* y, const uint16_t* x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) store_bf16(y + i, 0xFFFF, gelu_ps(load_bf16(0xFFFF, x + i)));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    store_bf16(y + i, m, gelu_ps(load_bf16(m, x + i)));
  }
}

void gelu_bwd_bf16_rows(uint16_t* gi, const uint16_t* g, const uint16_t* x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    store_bf16(gi + i, 0xFFFF, gelu_grad_ps(load_bf16(0xFFFF, x + i), load_bf16(0xFFFF, g + i)));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    store_bf16(gi + i, m, gelu_grad_ps(load_bf16(m, x + i), load_bf16(m, g + i)));
  }
}

}  // namespace
}  // namespace mixp::vec::avx512

#define MIXP_VEC_NS avx512
#define MIXP_VEC_TIER_NAME "avx512"
#define MIXP_VEC_HAS_GELU_ROWS 1
#include "backend/cpu/vec_kernels.inc"

namespace mixp::vec {
const Kernels& kernels_avx512() {
  return avx512::table();
}
}  // namespace mixp::vec
