// transpose_f32_avx512 (transpose_f32.h): 16 x 16 blocks loaded as rows, transposed in registers,
// stored as columns; partial blocks at the edges use masked loads and stores.
#include "backend/cpu/transpose_f32.h"

// GCC 12 reports the undefined pass-through operand of its own AVX-512 intrinsics
// (_mm512_undefined_*) as maybe-uninitialized; the intrinsics are correct.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace mixp::cpu {

void transpose_f32_avx512(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows,
                          int64_t cols) {
  for (int64_t r0 = 0; r0 < rows; r0 += 16) {
    const int64_t rn = rows - r0 < 16 ? rows - r0 : 16;
    const __mmask16 rmask = __mmask16((1u << rn) - 1);
    for (int64_t c0 = 0; c0 < cols; c0 += 16) {
      const int64_t cn = cols - c0 < 16 ? cols - c0 : 16;
      const __mmask16 cmask = __mmask16((1u << cn) - 1);
      __m512 r[16];
      for (int64_t i = 0; i < 16; ++i)
        r[i] = i < rn ? _mm512_maskz_loadu_ps(cmask, src + (r0 + i) * lds + c0) : _mm512_setzero_ps();
      transpose16_ps(r);
      for (int64_t j = 0; j < cn; ++j) _mm512_mask_storeu_ps(dst + (c0 + j) * ldd + r0, rmask, r[j]);
    }
  }
}

}  // namespace mixp::cpu
