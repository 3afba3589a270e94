// The int4/int2 GEMM that expands packed codes in registers (internal; backend/lowbit_gemm.h,
// lowbit_gemm_s32; docs/architecture.md 6.6). Only an AVX-512 VNNI kernel: elsewhere
// lowbit_gemm_s32 unpacks to int8 and runs int8_gemm_s32.
#pragma once
#include <cstdint>

#include "mixp/backend/lowbit_gemm.h"

namespace mixp::cpu::lowbit {

void gemm_avx512(int32_t* dst, const uint8_t* a, int64_t lda, const LowBitB& b, int64_t M);

}  // namespace mixp::cpu::lowbit
