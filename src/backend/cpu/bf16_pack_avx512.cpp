// The two pair packings of bf16 matrices (bf16_pack.h), shared by the per-head attention and the
// bf16 GEMM. Pure data movement: no value changes.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/bf16_pack.h"
#include "backend/cpu/transpose_f32.h"
#include "backend/cpu/vdpbf16_block.h"

namespace mixp::cpu {
namespace {
// 32-bit lanes through the fp32 transpose (transpose_f32.h): a pair is moved as one lane.
inline void transpose16_epi32(__m512i x[16]) {
  __m512 r[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_castsi512_ps(x[i]);
  transpose16_ps(r);
  for (int i = 0; i < 16; ++i) x[i] = _mm512_castps_si512(r[i]);
}
}  // namespace

void pack_transpose_avx512(uint32_t* dst, const uint16_t* src, int64_t ld, int64_t rows,
                           int64_t cols, int64_t n) {
  const int64_t k2 = cols / 2;
  if (ld % 2 == 0) {
    // 16 x 16 blocks of pairs transposed in registers (4-byte aligned pairs: ld even).
    const auto* base = reinterpret_cast<const uint32_t*>(src);
    for (int64_t r0 = 0; r0 < n; r0 += 16) {
      for (int64_t c0 = 0; c0 < k2; c0 += 16) {
        const int64_t cl = k2 - c0;
        const __mmask16 cm = cl >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << cl) - 1);
        __m512i x[16];
        for (int i = 0; i < 16; ++i)
          x[i] = r0 + i < rows ? _mm512_maskz_loadu_epi32(cm, base + (r0 + i) * (ld / 2) + c0)
                               : _mm512_setzero_si512();
        transpose16_epi32(x);
        for (int64_t i = 0; i < std::min<int64_t>(16, cl); ++i)
          _mm512_storeu_si512(dst + (c0 + i) * n + r0, x[i]);
      }
    }
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* row = src + r * ld;
    for (int64_t kp = 0; kp < k2; ++kp) {
      uint32_t pair;
      std::memcpy(&pair, row + 2 * kp, sizeof pair);
      dst[kp * n + r] = pair;
    }
  }
  for (int64_t kp = 0; kp < k2; ++kp)
    for (int64_t r = rows; r < n; ++r) dst[kp * n + r] = 0;
}

void pack_rows_avx512(uint32_t* dst, int64_t ldd, const uint16_t* src, int64_t ld, int64_t rows,
                      int64_t cols, int64_t n) {
  const int64_t r2 = (rows + 1) / 2;
  for (int64_t rp = 0; rp < r2; ++rp) {
    const uint16_t* lo = src + 2 * rp * ld;
    const uint16_t* hi = 2 * rp + 1 < rows ? lo + ld : nullptr;
    uint32_t* out = dst + rp * ldd;
    for (int64_t c0 = 0; c0 < n; c0 += 16) {
      const int64_t left = cols - c0;
      const __mmask16 m = left >= 16  ? __mmask16(0xFFFF)
                          : left <= 0 ? __mmask16(0)
                                      : __mmask16((1u << left) - 1);
      _mm512_storeu_si512(out + c0, pair_rows_x16(lo + c0, hi ? hi + c0 : nullptr, m));
    }
  }
}

}  // namespace mixp::cpu
