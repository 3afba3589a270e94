// The avx512 tier of the FP8/MX quantize kernels (see fp8_kernels.h).
#define MIXP_FP8K_NS avx512
#define MIXP_FP8K_TIER_NAME "avx512"
#include "backend/cpu/fp8_kernels.inc"

namespace mixp::cpu::fp8k {
const Kernels& kernels_avx512() { return avx512::table(); }
}  // namespace mixp::cpu::fp8k
