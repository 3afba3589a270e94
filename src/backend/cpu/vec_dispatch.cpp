#include "backend/cpu/vec_kernels.h"
#include "mixp/backend/cpu_features.h"

namespace mixp::vec {
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
}  // namespace mixp::vec
