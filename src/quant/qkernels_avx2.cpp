// The AVX2 tier of the quant kernels (see qkernels.h).
#define MIXP_QK_NS avx2
#define MIXP_QK_TIER_NAME "avx2"
#include "quant/qkernels.inc"

namespace mixp::quant::kern {
const Kernels& kernels_avx2() {
  return avx2::table();
}
}  // namespace mixp::quant::kern
