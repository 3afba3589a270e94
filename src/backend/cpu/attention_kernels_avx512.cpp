// AVX512-BF16 micro-kernels of the per-head attention (attention_kernels.h): a register-blocked
// VDPBF16PS GEMM over pair-packed operands (packed by bf16_pack.h).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "attention_kernels.h"
#include "backend/cpu/vdpbf16_block.h"

namespace mixp::cpu::attn {
namespace {

// An MR x (16 NV) block of C: MR * NV accumulators, the pairs of K in order.
template <int MR, int NV>
void micro(float* c, int64_t ldc, const uint32_t* a, int64_t am, int64_t ak, const uint32_t* b,
           int64_t ldb, int64_t k2) {
  __m512 acc[MR][NV];
  vdpbf16_block(
      acc, [&](int r, int64_t kp) { return a[r * am + kp * ak]; }, b, ldb, k2);
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
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
