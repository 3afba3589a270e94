// Internal: CudaBackend, the Backend of the cuda devices (one instance per device). It overrides
// the kernels whose cuda column is 1 in the kernel table (mixp/backend/kernels.def); the rest
// throw from CudaBackendBase (cuda_backend_base.h).
// The kernels themselves are in cuda_pointwise.cu, cuda_rows.cu, cuda_norm.cu, cuda_step.cu
// (launchers in cuda_kernels.h) and cuda_gemm.cpp (cuBLASLt); this class checks dtypes and
// layouts, turns Tensors into the launchers' descriptors, and checks each launch.
#pragma once
#include <string>

#include "backend/cuda/cuda_backend_base.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_kernels.h"

namespace mixp::cuda {

// A tensor's device pointer, read inside a DeviceAccessScope (tensor/device.h): outside one,
// data_ptr() of a cuda tensor throws, so that host code without a cuda kernel fails clearly
// instead of crashing on device memory.
inline void* dev_ptr(const Tensor& t) {
  const DeviceAccessScope in_kernel;
  return t.data_ptr();
}

// Throws std::runtime_error("mixp: <op> on cuda: <what> is not implemented on cuda yet
// (docs/cuda.md)"): one message for every kernel that refuses a dtype, layout or option.
[[noreturn]] void unsupported(const char* op, const std::string& what);

// The Elem of a dtype; fp64 and block formats throw not_implemented (only fp32/16-bit/fp8
// compute is built on cuda).
Elem elem_of(DType t, const char* op);
View view_of(const Tensor& t, const char* op);
Shape8 shape_of(const Shape& s, const char* op);

class CudaBackend final : public CudaBackendBase {
 public:
  explicit CudaBackend(int index) : index_(index) {}
  const char* name() const override { return "cuda"; }

  // The kernels whose cuda column is 1 in the kernel table: cuda_backend.cpp (pointwise, rows,
  // step; kernels in cuda_pointwise.cu, cuda_rows.cu, cuda_norm.cu, cuda_step.cu),
  // cuda_backend_nn.cpp (kernels: cuda_nn.cu, rules: math/nn_math.h; GEMMs: cuBLASLt),
  // cuda_backend_quant.cpp (kernels: cuda_quant.cu, rules: math/quant_math.h), cuda_gemm.cpp
  // (matmul).
#define MIXP_KERNEL(name, kind, ref, cpu, cuda, params, args, observe) \
  MIXP_KT_IF(cuda, void name params override;)
#include "mixp/backend/kernels.def"
  bool fp8_matmul() const override;

 private:
  DeviceContext& ctx() { return context(index_); }
  void pointwise(PointwiseArgs& a, const Tensor& dst);
  int index_;
};

// cuda_gemm.cpp: dst = act(a @ b + bias) (or += without act) through cuBLASLt.
void gemm_lt(DeviceContext& ctx, Tensor& dst, const Tensor& a, const Tensor& b, const Tensor& bias,
             const MatmulConfig& cfg);
// Whether ctx's device runs FP8 GEMMs natively (compute capability >= 8.9).
bool fp8_gemm_native(const DeviceContext& ctx);
// dst [M, N] (fp32 or bf16, contiguous) = scale_a[0] * scale_b[0] * (a [M, K] @ b [K, N]) for
// fp8 a, b (E4M3 x E4M3, E4M3 x E5M2, E5M2 x E4M3; any 2-d layout, copied into cuBLASLt's TN
// where needed); the scales are fp32 device scalars, both null for 1. cuBLASLt's FP8 kernels
// when the device has them and K and the leading dimensions are multiples of 16 (returns true),
// else the bf16 GEMM on the exactly widened values (false). The one FP8 GEMM of the backend:
// cuda_fp8_matmul (mixp/backend/cuda_gemm.h) and CudaBackend::matmul with an fp8 compute (the
// FP8 recipes, through mixp::gemm) both call it.
bool fp8_gemm(DeviceContext& ctx, Tensor& dst, const Tensor& a, const Tensor& b,
              const float* scale_a, const float* scale_b, bool fast_accum);

}  // namespace mixp::cuda
