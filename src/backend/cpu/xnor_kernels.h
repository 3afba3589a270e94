// The XNOR-popcount GEMM kernels of the packed binary-act layers (internal; docs/architecture.md
// 6.6): one row block of dst[m * O + o] = k - 2 * popcount(a[m] ^ b[o]) over `words` 64-bit
// words. The AVX-512 kernel needs VPOPCNTDQ as well; the generic one is the
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

// The same sums compared with thresholds, straight into sign bits (lowbit_gemm.h,
// xnor_sign_bits): O a multiple of 16; out [M, ceil(O / 64)] words.
void xnor_sign_bits_avx512(uint64_t* out, const uint64_t* a, const uint64_t* b, int64_t M,
                           int64_t O, int64_t words, int32_t k, const int32_t* const* thr,
                           const uint64_t* flip);

}  // namespace mixp::cpu::xnor
