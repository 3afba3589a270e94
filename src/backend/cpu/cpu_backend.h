// The CPU backend (internal header): oneDNN for matmul and conv2d (primitives cached per shape),
// OpenMP loops the compiler vectorizes for pointwise ops, reductions, softmax and norms. Every
// kernel falls back to RefBackend for what it does not specialize (fp64, odd strides).
#pragma once
#include "backend/ref/ref_backend.h"

namespace mixp {

class CpuBackend : public RefBackend {
 public:
  const char* name() const override { return "cpu"; }
  // The kernels whose cpu column is 1 in the kernel table (cpu_*.cpp, step_*.cpp; the FP8/MX
  // kernels of fp8_kernels.h, the QAT kernels of qkernels.h); the rest are RefBackend's.
#define MIXP_KERNEL(name, kind, ref, cpu, cuda, params, args, observe) \
  MIXP_KT_IF(cpu, void name params override;)
#include "mixp/backend/kernels.def"

  // reduce()'s sum/mean over bf16/fp16 operands (cpu_reduce.cpp).
  void reduce_narrow_sum(ReduceOp op, Tensor& dst, const Tensor& src);
  // [B, H, T, D] views with unit stride along D (cpu_attention.cpp): the GEMMs read and write
  // them in place.
  bool attention_strided() const override { return true; }
};

}  // namespace mixp
