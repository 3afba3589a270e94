// The avx2 tier of the vectorized row kernels (see vec_kernels.h).
#include "backend/cpu/vec_kernels.h"

#define MIXP_VEC_NS avx2
#define MIXP_VEC_TIER_NAME "avx2"
#include "backend/cpu/vec_kernels.inc"

namespace mixp::vec {
const Kernels& kernels_avx2() {
  return avx2::table();
}
}  // namespace mixp::vec
