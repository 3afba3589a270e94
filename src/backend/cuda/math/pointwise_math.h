// The element functions of the CUDA pointwise kernels (cuda_pointwise.cu): the ref backend's
// scalar math (src/backend/math/pointwise_math.h) in fp32, on cuda's int op codes: sin, cos and
// the exact GELU in double, one rounding of the result. tests/cuda/test_cuda_math.cpp compares
// them with the ref backend on the CPU: bit for bit where the operation is IEEE-exact (neg, add, sub, mul, div,
// sqrt, relu, the scalar ops but pow), within a few ulps where a libm function is involved (the
// GPU's libdevice and glibc round exp/log/tanh differently).
#pragma once
#include <cmath>
#include <cstdint>

#include "backend/math/host_device.h"
#include "backend/math/pointwise_math.h"
#include "mixp/backend/op_codes.h"

namespace mixp::cuda_math {

// The op codes are the values of mixp::UnaryOp / BinaryOp / ScalarOp, expanded from the same
// lists (mixp/backend/op_codes.h), so they cannot drift apart.
#define MIXP_CUDA_CODE_(prefix, name) prefix##name,
#define MIXP_CUDA_U_(name, ...) MIXP_CUDA_CODE_(u_, name)
#define MIXP_CUDA_B_(name) MIXP_CUDA_CODE_(b_, name)
#define MIXP_CUDA_S_(name) MIXP_CUDA_CODE_(s_, name)
enum UnaryCode : int { MIXP_UNARY_OPS(MIXP_CUDA_U_) };
enum BinaryCode : int { MIXP_BINARY_OPS(MIXP_CUDA_B_) };
enum ScalarCode : int { MIXP_SCALAR_OPS(MIXP_CUDA_S_) };
#undef MIXP_CUDA_CODE_
#undef MIXP_CUDA_U_
#undef MIXP_CUDA_B_
#undef MIXP_CUDA_S_

// The element functions on cuda's int codes: the shared scalar math (backend/math/
// pointwise_math.h) in fp32, the same functions the ref backend runs.
MIXP_HD float unary_fwd(int op, float x) {
  return kern::unary_fwd<float>(static_cast<UnaryOp>(op), x);
}
// g * op'(x), given x (src) and y (dst), as kern::unary_bwd.
MIXP_HD float unary_bwd(int op, float g, float x, float y) {
  return kern::unary_bwd<float>(static_cast<UnaryOp>(op), g, x, y);
}
MIXP_HD float binary_fwd(int op, float a, float b) {
  return kern::binary_fwd<float>(static_cast<BinaryOp>(op), a, b);
}
MIXP_HD float scalar_fwd(int op, float x, float s) {
  return kern::scalar_fwd<float>(static_cast<ScalarOp>(op), x, s);
}
using kern::dropout_keep;

}  // namespace mixp::cuda_math
