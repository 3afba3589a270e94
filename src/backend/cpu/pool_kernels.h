// AVX-512 pooling kernels (pool_avx512.cpp); call only when simd_tier() is avx512.
#pragma once
#include <cstdint>

namespace mixp::pool {
void maxpool2x2_avx512(float* y, const float* x, int64_t W, int64_t OH, int64_t OW);
void maxpool2x2_bwd_avx512(float* gi, const float* g, const float* x, int64_t W, int64_t OH,
                           int64_t OW);
}  // namespace mixp::pool
