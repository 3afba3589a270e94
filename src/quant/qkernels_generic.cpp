// The baseline tier of the quant kernels (see qkernels.h).
#define MIXP_QK_NS generic
#define MIXP_QK_TIER_NAME "generic"
#include "mixp/backend/cpu_features.h"
#include "quant/qkernels.inc"

namespace mixp::quant::kern {
const Kernels& kernels_generic() {
  return generic::table();
}

const Kernels& kernels() {
  static const Kernels* k = [] {
    switch (simd_tier()) {
      case SimdTier::avx512:
        return &kernels_avx512();
      case SimdTier::avx2:
        return &kernels_avx2();
      default:
        return &kernels_generic();
    }
  }();
  return *k;
}
}  // namespace mixp::quant::kern
