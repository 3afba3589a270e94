// Portable XNOR-popcount GEMM (the reference of xnor_kernels_avx512.cpp); see xnor_kernels.h.
#include <bit>

#include "backend/cpu/xnor_kernels.h"

namespace mixp::cpu::xnor {

void xnor_gemm_generic(int32_t* dst, const uint64_t* a, const uint64_t* b, int64_t M, int64_t O,
                       int64_t words, int32_t k) {
  for (int64_t m = 0; m < M; ++m) {
    const uint64_t* am = a + m * words;
    for (int64_t o = 0; o < O; ++o) {
      const uint64_t* bo = b + o * words;
      int64_t c = 0;
      for (int64_t w = 0; w < words; ++w) c += std::popcount(am[w] ^ bo[w]);
      dst[m * O + o] = k - 2 * static_cast<int32_t>(c);
    }
  }
}

}  // namespace mixp::cpu::xnor
