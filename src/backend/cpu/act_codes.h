// Activation codes as bytes for the packed models' direct first convolution (internal;
// backend/lowbit_gemm.h, act_codes_u8; docs/architecture.md 6.6).
#pragma once
#include <cstdint>

namespace mixp::cpu::codes {

void act_codes_u8_avx512(uint8_t* dst, const float* src, int64_t n, float inv, float qmin,
                         float qmax, int32_t offset);

}  // namespace mixp::cpu::codes
