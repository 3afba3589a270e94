// The avx512 tier of the block-scaled quantizer loops (see block_scaled_kernels.h).
#define MIXP_BSK_NS avx512
#include "format/block_scaled_kernels.inc"

namespace mixp::detail {
const BlockKernels& block_kernels_avx512() { return avx512::table(); }
}  // namespace mixp::detail
