// Internal: how fp8_linear tells the Fp8Autocast machinery which scaling states it used.
#pragma once
#include <memory>

#include "mixp/amp/fp8_scaling.h"
#include "mixp/backend/backend.h"
#include "mixp/format/block_scaled.h"
#include "mixp/tensor/tensor.h"

namespace mixp::amp {
class Fp8LinearMeta;
}

namespace mixp::amp::detail {

// A forward role's state was used: updated when the outermost Fp8Autocast region exits (with
// grad mode on). Ignored outside any region.
void note_forward_state(const std::shared_ptr<Fp8ScalingState>& s);
// A grad_output state recorded an amax in backward: updated by fp8_update_backward_states().
void note_backward_state(const std::shared_ptr<Fp8ScalingState>& s);
// Whether casts record their amax now: outside any region, or in a region entered with grad
// mode on (not an evaluation pass) that is not a recomputation.
bool records_amax();

// The output gradient of a Linear as a contiguous [M, N], through the fused ReLU's mask when the
// forward kept its output (keep_y defined): where fp8_linear's and block_scaled_linear's
// backward start (fp8_linear.cpp).
Tensor linear_output_grad(const Tensor& grad, const Tensor& keep_y, int64_t M, int64_t N);
// The forward's [M, N] result y viewed in the input's shape with its last dimension N: the
// Linear's output, as fp8_linear's and the block-scaled Linears' forwards return it.
Tensor linear_output(const Tensor& y, const Shape& x_shape, int64_t N);

// fp8_linear for the block-scaled recipes (fp8_block, nvfp4, mxfp4): block_linear.cpp.
Tensor block_scaled_linear(const Tensor& x, const Tensor& w, const Tensor& b, Activation act,
                           Fp8LinearMeta& meta);

// block_scaled_linear on a cuda device (block_linear_cuda.cpp): the same operands and roles as
// the host path (block_linear.cpp), quantized and multiplied on the device
// (mixp/backend/cuda_block.h). seed(values, n, role) is the host path's value_seed, for the
// gradient's stochastic rounding (role_g rows, role_gc columns).
struct BlockLinearCudaPlan {
  BlockScaledOptions act, weight, grad;
  bool rht = false;
  uint64_t (*seed)(const float* p, size_t n, uint64_t role) = nullptr;
  uint64_t role_g = 0, role_gc = 0;
};
Tensor block_scaled_linear_cuda(const Tensor& x, const Tensor& w, const Tensor& b, Activation act,
                                const BlockLinearCudaPlan& plan);

}  // namespace mixp::amp::detail
