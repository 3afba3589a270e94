// The AVX-512 tier of the quant kernels (see qkernels.h).
#define MIXP_QK_NS avx512
#define MIXP_QK_TIER_NAME "avx512"
#include "backend/cpu/qkernels.inc"

namespace mixp::cpu::qk {
const Kernels& kernels_avx512() {
  return avx512::table();
}
}  // namespace mixp::cpu::qk
