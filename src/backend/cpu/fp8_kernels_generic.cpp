// The generic tier of the FP8/MX quantize kernels (see fp8_kernels.h).
#define MIXP_FP8K_NS generic
#define MIXP_FP8K_TIER_NAME "generic"
#include "backend/cpu/fp8_kernels.inc"

namespace mixp::cpu::fp8k {
const Kernels& kernels_generic() { return generic::table(); }
}  // namespace mixp::cpu::fp8k
