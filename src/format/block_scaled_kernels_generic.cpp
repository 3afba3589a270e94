// The generic tier of the block-scaled quantizer loops (see block_scaled_kernels.h), and the
// dispatch.
#define MIXP_BSK_NS generic
#include "format/block_scaled_kernels.inc"

namespace mixp::detail {
const BlockKernels& block_kernels_generic() { return generic::table(); }
const BlockKernels& block_kernels(SimdTier tier) {
  return tier == SimdTier::avx512 ? block_kernels_avx512() : block_kernels_generic();
}
}  // namespace mixp::detail
