// Thresholds to sign bits with AVX-512: one VPCMPD per 16 channels writes their bits straight
// into a mask register; see sign_bits.h.
#include <immintrin.h>

#include "backend/cpu/sign_bits.h"

namespace mixp::cpu::bits {

__attribute__((target("avx512f"))) void sign_bits_avx512(uint64_t* out, const int32_t* acc,
                                                         int64_t M, int64_t O, const int32_t* t,
                                                         const uint64_t* flip) {
  const int64_t CW = (O + 63) / 64;
  for (int64_t m = 0; m < M; ++m) {
    const int32_t* a = acc + m * O;
    uint64_t* w = out + m * CW;
    for (int64_t j = 0; j < CW; ++j) {
      uint64_t v = 0;
      for (int64_t q = 0; q < 4; ++q) {
        const int64_t o = 64 * j + 16 * q;
        if (o >= O) break;
        const __mmask16 live = O - o >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (O - o)) - 1);
        const __m512i x = _mm512_maskz_loadu_epi32(live, a + o);
        const __m512i y = _mm512_maskz_loadu_epi32(live, t + o);
        v |= uint64_t{_mm512_mask_cmplt_epi32_mask(live, x, y)} << (16 * q);
      }
      w[j] = v ^ flip[j];
    }
  }
}

}  // namespace mixp::cpu::bits
