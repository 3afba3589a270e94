// The avx512 tier of the vectorized row kernels (see vec_kernels.h).
#include "backend/cpu/vec_kernels.h"

#define MIXP_VEC_NS avx512
#define MIXP_VEC_TIER_NAME "avx512"
#include "backend/cpu/vec_kernels.inc"

namespace mixp::vec {
const Kernels& kernels_avx512() {
  return avx512::table();
}
}  // namespace mixp::vec
