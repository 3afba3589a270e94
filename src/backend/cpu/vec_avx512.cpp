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

// y = gelu(x) = x / (1 + exp(-2u)) (the sigmoid form of the tanh approximation; see fgelu in
// vec_kernels.inc for why and for the accuracy).
void gelu_fwd_rows(float* y, const float* x, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1u);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    const __m512 e = gelu_e(v, _mm512_mul_ps(v, v));
    _mm512_mask_storeu_ps(y + i, m, _mm512_div_ps(v, _mm512_add_ps(one, e)));
  }
}

// gi = g * gelu'(x) = g (s + 2 x u'(x) e s^2), s = 1 / (1 + e) (see fgelu_grad in
// vec_kernels.inc); e capped at FLT_MAX so that e s stays finite in the far left tail.
void gelu_bwd_rows(float* gi, const float* g, const float* x, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 c1 = _mm512_set1_ps(2.0f * 0.7978845608028654f);
  const __m512 c3 = _mm512_set1_ps(2.0f * 0.7978845608028654f * 3.0f * 0.044715f);
  const __m512 fmax = _mm512_set1_ps(3.40282347e38f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1u);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    const __m512 gv = _mm512_maskz_loadu_ps(m, g + i);
    const __m512 v2 = _mm512_mul_ps(v, v);
    const __m512 e = _mm512_min_ps(gelu_e(v, v2), fmax);
    const __m512 s = _mm512_div_ps(one, _mm512_add_ps(one, e));
    const __m512 t = _mm512_mul_ps(v, _mm512_fmadd_ps(c3, v2, c1));  // 2 x u'(x)
    const __m512 d = _mm512_fmadd_ps(_mm512_mul_ps(t, _mm512_mul_ps(e, s)), s, s);
    _mm512_mask_storeu_ps(gi + i, m, _mm512_mul_ps(gv, d));
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
