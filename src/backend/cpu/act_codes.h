// Activation codes of the packed models, as bytes for the direct first convolution or as floats
// between unfused layers (internal; backend/lowbit_gemm.h, act_codes_u8 and act_codes_f32;
// docs/architecture.md 6.6).
#pragma once
#include <cstdint>

namespace mixp::cpu::codes {

void act_codes_f32_avx512(float* dst, const float* src, int64_t n, float inv, float qmin,
                          float qmax);
void act_codes_u8_avx512(uint8_t* dst, const float* src, int64_t n, float inv, float qmin,
                         float qmax, int32_t offset);

}  // namespace mixp::cpu::codes
