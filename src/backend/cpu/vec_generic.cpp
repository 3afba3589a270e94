// The generic tier of the vectorized row kernels (see vec_kernels.h).
#include "backend/cpu/vec_kernels.h"

#define MIXP_VEC_NS generic
#define MIXP_VEC_TIER_NAME "generic"
#include "backend/cpu/vec_kernels.inc"

namespace mixp::vec {
const Kernels& kernels_generic() {
  return generic::table();
}
}  // namespace mixp::vec
