// The CUDA backend: whether this libmixp has it, and whether this machine can run it
// (docs/cuda.md). Tensors on Device::cuda(i) allocate through its caching device allocator and
// compute on its backend (backend_for, backend/backend.h); Tensor::to(Device) copies between the
// host and the device. Built when CMake finds the CUDA toolkit (MIXP_CUDA=AUTO|ON|OFF).
//
// Untested on hardware: the kernels' arithmetic is checked on the CPU in every build
// (tests/cuda), but no GPU has run them yet; scripts/gpu-check.sh is the check to run on one.
#pragma once
#include <cstdint>
#include <string>

#include "mixp/tensor/allocator.h"

namespace mixp {

struct CudaStatus {
  bool built = false;              // this libmixp contains the CUDA backend
  std::string toolkit_version;     // the toolkit it was built with ("13.0.88"), "" when not built
  std::string architectures;       // the GPU architectures compiled for ("80;89;90")
  int runtime_version = 0;         // cudaRuntimeGetVersion, 0 when unknown
  int device_count = 0;            // CUDA devices this process sees (0: none, or not built)
  std::string message;             // one line: "1 CUDA device" or "no CUDA device: <why>"
  bool tested_on_hardware = false; // whether gpu-check.sh has passed on a GPU for this version
};
// Never throws; asks the CUDA runtime once per process.
const CudaStatus& cuda_status();
// Built and at least one device present.
bool cuda_available();

// The caching allocator of cuda:index (same policy and statistics as the cpu one, allocator.h).
// Throws "no CUDA device: ..." (saying what to do) when there is no such device.
CachingAllocator& cuda_allocator(int index = 0);

// Waits until every kernel and copy queued on cuda:index has finished (the backend queues all its
// work on one stream per device). For timing; results read through Tensor::to(Device::cpu())
// or item() are waited for already. Throws as cuda_allocator.
void cuda_synchronize(int index = 0);

// TF32: with float32_matmul_precision("high") (ops/matmul_precision.h, the one switch) fp32 GEMMs
// on cuda run on the TF32 Tensor Cores (MatmulConfig::tf32 -> CUBLAS_COMPUTE_32F_FAST_TF32).

}  // namespace mixp
