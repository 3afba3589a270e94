// The direct int8 convolution with a sign-bit epilogue (internal; backend/lowbit_gemm.h,
// int8_conv_sign_bits; docs/architecture.md 6.6). Only an AVX-512 VNNI kernel: elsewhere the
// caller takes oneDNN's convolution and sign_bits_s32.
#pragma once
#include <cstdint>

namespace mixp::cpu::bits {

void conv_sign_bits_avx512(uint64_t* out, const uint8_t* img, const int8_t* w, int64_t N,
                           int64_t C, int64_t HP, int64_t WPS, int64_t KS, int64_t stride,
                           int64_t OH, int64_t OW, int64_t O, const int32_t* thr,
                           const uint64_t* flip);

}  // namespace mixp::cpu::bits
