// The AVX2 tier of the quant kernels (see qkernels.h).
#define MIXP_QK_NS avx2
#define MIXP_QK_TIER_NAME "avx2"
#include "backend/cpu/qkernels.inc"

namespace mixp::cpu::qk {
const Kernels& kernels_avx2() {
  return avx2::table();
}
}  // namespace mixp::cpu::qk
