// The XNOR-popcount GEMM kernels of the packed binary-act layers (internal; docs/architecture.md
// 6.6): one row block of dst[m * O + o] = k - 2 * popcount(a[m] ^ b[o]) over `words` 64-bit
// words (a multiple of 8). The AVX-512 kernel needs VPOPCNTDQ as well; the generic one is the
// reference.
#pragma once
#include <cstdint>

namespace mixp::cpu::xnor {

using XnorGemmFn = void (*)(int32_t* dst, const uint64_t* a, const uint64_t* b, int64_t M,
                            int64_t O, int64_t words, int32_t k);

void xnor_gemm_generic(int32_t* dst, const uint64_t* a, const uint64_t* b, int64_t M, int64_t O,
                       int64_t words, int32_t k);
void xnor_gemm_avx512(int32_t* dst, const uint64_t* a, const uint64_t* b, int64_t M, int64_t O,
                      int64_t words, int32_t k);

}  // namespace mixp::cpu::xnor
