// The avx2 tier of the FP8/MX quantize kernels (see fp8_kernels.h).
#define MIXP_FP8K_NS avx2
#define MIXP_FP8K_TIER_NAME "avx2"
#include "backend/cpu/fp8_kernels.inc"

namespace mixp::cpu::fp8k {
const Kernels& kernels_avx2() { return avx2::table(); }
}  // namespace mixp::cpu::fp8k
