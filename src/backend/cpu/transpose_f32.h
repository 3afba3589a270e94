// The 16 x 16 transpose of 32-bit lanes in AVX-512 registers, shared by the kernels that need a
// column-major view of a row-major tile: the packed models' rescale (lowbit_rescale_avx512.cpp)
// and the bf16 pair packing (bf16_pack_avx512.cpp). Pure data movement: no value changes.
#pragma once
#include <cstdint>

#ifdef __AVX512F__
#include <immintrin.h>

namespace mixp::cpu {

// r[i] = row i of a 16 x 16 block -> r[j] = column j. The zero-masked forms with full masks:
// GCC 12's unmasked ones pass an undefined merge source that -Wall reports as uninitialized
// where the rows come from registers (bf16_pack_avx512.cpp); both compile to the same code.
inline void transpose16_ps(__m512* r) {
  const auto lo_pd = [](__m512 a, __m512 b) {
    return _mm512_castpd_ps(
        _mm512_maskz_unpacklo_pd(0xFF, _mm512_castps_pd(a), _mm512_castps_pd(b)));
  };
  const auto hi_pd = [](__m512 a, __m512 b) {
    return _mm512_castpd_ps(
        _mm512_maskz_unpackhi_pd(0xFF, _mm512_castps_pd(a), _mm512_castps_pd(b)));
  };
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_maskz_unpacklo_ps(0xFFFF, r[i], r[i + 1]);
    t[i + 1] = _mm512_maskz_unpackhi_ps(0xFFFF, r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = lo_pd(t[i], t[i + 2]);
    r[i + 1] = hi_pd(t[i], t[i + 2]);
    r[i + 2] = lo_pd(t[i + 1], t[i + 3]);
    r[i + 3] = hi_pd(t[i + 1], t[i + 3]);
  }
  for (int h = 0; h < 16; h += 8) {
    for (int i = 0; i < 4; ++i) {
      t[h + i] = _mm512_maskz_shuffle_f32x4(0xFFFF, r[h + i], r[h + i + 4], 0x88);
      t[h + i + 4] = _mm512_maskz_shuffle_f32x4(0xFFFF, r[h + i], r[h + i + 4], 0xdd);
    }
  }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_maskz_shuffle_f32x4(0xFFFF, t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_maskz_shuffle_f32x4(0xFFFF, t[i], t[i + 8], 0xdd);
  }
}

}  // namespace mixp::cpu
#endif
