// AVX512-BF16 micro-kernels of the per-head attention (attention_kernels.h): a register-blocked
// VDPBF16PS GEMM over pair-packed operands and the two packings it takes.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "attention_kernels.h"

namespace mixp::cpu::attn {
namespace {
// GCC 12's unmasked forms pass _mm512_undefined_epi32() as the merge source, which -Wall reports
// as uninitialized (sum_squares_avx512.cpp); the zero-masked forms compile to the same code.
inline __m512i widen16(__m256i x) {
  return _mm512_maskz_cvtepu16_epi32(0xFFFF, x);
}
inline __m512bh as_bh(__m512i x) {
  return reinterpret_cast<__m512bh&>(x);
}

// Transposes the 16 x 16 matrix of 32-bit elements whose rows are x[0..15] (the zero-masked
// forms: see widen16).
inline void transpose16(__m512i x[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_maskz_unpacklo_epi32(0xFFFF, x[i], x[i + 1]);
    t[i + 1] = _mm512_maskz_unpackhi_epi32(0xFFFF, x[i], x[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    x[i] = _mm512_maskz_unpacklo_epi64(0xFF, t[i], t[i + 2]);
    x[i + 1] = _mm512_maskz_unpackhi_epi64(0xFF, t[i], t[i + 2]);
    x[i + 2] = _mm512_maskz_unpacklo_epi64(0xFF, t[i + 1], t[i + 3]);
    x[i + 3] = _mm512_maskz_unpackhi_epi64(0xFF, t[i + 1], t[i + 3]);
  }
  for (int h = 0; h < 16; h += 8) {
    for (int i = 0; i < 4; ++i) {
      t[h + i] = _mm512_maskz_shuffle_i32x4(0xFFFF, x[h + i], x[h + i + 4], 0x88);
      t[h + i + 4] = _mm512_maskz_shuffle_i32x4(0xFFFF, x[h + i], x[h + i + 4], 0xdd);
    }
  }
  for (int i = 0; i < 8; ++i) {
    x[i] = _mm512_maskz_shuffle_i32x4(0xFFFF, t[i], t[i + 8], 0x88);
    x[i + 8] = _mm512_maskz_shuffle_i32x4(0xFFFF, t[i], t[i + 8], 0xdd);
  }
}

// An MR x (16 NV) block of C: MR * NV accumulators, the pairs of K in order.
template <int MR, int NV>
void micro(float* c, int64_t ldc, const uint32_t* a, int64_t am, int64_t ak, const uint32_t* b,
           int64_t ldb, int64_t k2) {
  __m512 acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t kp = 0; kp < k2; ++kp) {
    __m512i bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_si512(b + kp * ldb + 16 * v);
    for (int r = 0; r < MR; ++r) {
      const __m512i av = _mm512_set1_epi32(static_cast<int>(a[r * am + kp * ak]));
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], as_bh(av), as_bh(bv[v]));
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(c + r * ldc + 16 * v, acc[r][v]);
}

using MicroFn = void (*)(float*, int64_t, const uint32_t*, int64_t, int64_t, const uint32_t*,
                         int64_t, int64_t);
constexpr int kMR = 6;

template <int NV>
MicroFn micro_for_rows(int64_t mr) {
  switch (mr) {
    case 1:
      return &micro<1, NV>;
    case 2:
      return &micro<2, NV>;
    case 3:
      return &micro<3, NV>;
    case 4:
      return &micro<4, NV>;
    case 5:
      return &micro<5, NV>;
    default:
      return &micro<6, NV>;
  }
}
MicroFn micro_for(int64_t mr, int64_t nv) {
  switch (nv) {
    case 1:
      return micro_for_rows<1>(mr);
    case 2:
      return micro_for_rows<2>(mr);
    case 3:
      return micro_for_rows<3>(mr);
    default:
      return micro_for_rows<4>(mr);
  }
}
}  // namespace

void gemm_bf16_avx512(float* c, int64_t ldc, const uint32_t* a, int64_t am, int64_t ak,
                      const uint32_t* b, int64_t ldb, int64_t M, int64_t N, int64_t k2) {
  // Panels of 64 columns (a B panel of k2 pairs stays in L1), each swept by blocks of up to 6
  // rows, the rows spread evenly over the blocks (32 rows: 6, 6, 5, 5, 5, 5, not 5 x 6 + 2).
  const int64_t blocks = (M + kMR - 1) / kMR;
  for (int64_t n0 = 0; n0 < N; n0 += 64) {
    const int64_t nv = (N - n0) >= 64 ? 4 : (N - n0) / 16;
    for (int64_t bi = 0, m0 = 0; bi < blocks; ++bi) {
      const int64_t mr = M / blocks + (bi < M % blocks ? 1 : 0);
      micro_for(mr, nv)(c + m0 * ldc + n0, ldc, a + m0 * am, am, ak, b + n0, ldb, k2);
      m0 += mr;
    }
  }
}

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
        transpose16(x);
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
      const __m512i l = widen16(_mm256_maskz_loadu_epi16(m, lo + c0));
      const __m512i h =
          hi ? _mm512_maskz_slli_epi32(0xFFFF, widen16(_mm256_maskz_loadu_epi16(m, hi + c0)), 16)
             : _mm512_setzero_si512();
      _mm512_storeu_si512(out + c0, _mm512_or_si512(l, h));
    }
  }
}

void store_bf16_rows_avx512(uint16_t* dst, int64_t ld, const float* src, int64_t lds, int64_t rows,
                            int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c0 = 0; c0 < cols; c0 += 16) {
      const int64_t left = cols - c0;
      const __mmask16 m = left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
      __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + r * lds + c0));
      _mm256_mask_storeu_epi16(dst + r * ld + c0, m, reinterpret_cast<__m256i&>(h));
    }
  }
}

}  // namespace mixp::cpu::attn
