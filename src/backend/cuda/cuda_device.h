// Internal: CUDA error checks, the devices this process sees, and one context per device (its
// stream, its cuBLASLt handle and workspace). Everything of the CUDA backend runs on that one
// stream per device, so the caching allocator may hand a freed block to the next tensor at once
// (stream order keeps the uses apart, as in PyTorch's CUDACachingAllocator); copies to the host
// synchronize the stream.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "backend/cuda/cublaslt_api.h"

#include <cstddef>

namespace mixp::cuda {

// Throws std::runtime_error naming the call, the CUDA error and where.
[[noreturn]] void throw_cuda_error(cudaError_t e, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t s, const char* call, const char* file,
                                     int line);
#define MIXP_CUDA_CHECK(call)                                                        \
  do {                                                                               \
    const cudaError_t mixp_e_ = (call);                                              \
    if (mixp_e_ != cudaSuccess) ::mixp::cuda::throw_cuda_error(mixp_e_, #call, __FILE__, __LINE__); \
  } while (0)
#define MIXP_CUBLAS_CHECK(call)                                                      \
  do {                                                                               \
    const cublasStatus_t mixp_s_ = (call);                                           \
    if (mixp_s_ != CUBLAS_STATUS_SUCCESS)                                            \
      ::mixp::cuda::throw_cublas_error(mixp_s_, #call, __FILE__, __LINE__);          \
  } while (0)
// After a kernel launch: a launch error (bad configuration, no kernel image for this GPU).
#define MIXP_CUDA_CHECK_LAUNCH() MIXP_CUDA_CHECK(cudaGetLastError())

// Throws std::invalid_argument "mixp: no CUDA device: ..." (what the runtime said, and what to
// do) unless device `index` exists: the same kind of error as a device whose backend is not built
// (src/tensor/tensor.cpp).
void require_device(int index);

struct DeviceContext {
  int index = 0;
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;  // cuBLASLt workspace
  size_t workspace_bytes = 0;
  int cc_major = 0, cc_minor = 0;
};
// The context of device `index` (created on first use), with that device made current on the
// calling thread. Throws as require_device.
DeviceContext& context(int index);

}  // namespace mixp::cuda
