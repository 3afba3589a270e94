// Internal: the base of the CUDA backend. Every PURE kernel of the kernel table
// (mixp/backend/kernels.def) whose cuda column is 0 throws "not implemented on cuda: <op>" here,
// in one place, expanded from the table; CudaBackend (cuda_backend.h) declares the kernels whose
// cuda column is 1. A kernel added to the table with cuda 0 starts out as a stub here
// (docs/cuda.md lists what is not implemented).
#pragma once
#include "mixp/backend/backend.h"

namespace mixp::cuda {

// Throws std::runtime_error("mixp: <op> is not implemented on cuda yet; ...").
[[noreturn]] void not_implemented(const char* op);

class CudaBackendBase : public Backend {
 public:
  // A stub for each PURE kernel whose cuda column in the kernel table is 0.
#define MIXP_KERNEL(name, kind, ref, cpu, cuda, params, args, observe)             \
  MIXP_KT_IF(MIXP_KT_AND(MIXP_KT_NOT(cuda), MIXP_KT_IS_PURE(kind)), void name params override { \
    not_implemented(#name);                                                          \
  })
#include "mixp/backend/kernels.def"
};

}  // namespace mixp::cuda
