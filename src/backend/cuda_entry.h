// Internal: the CUDA backend's entry point for backend_for (backend.cpp). Defined by
// src/backend/cuda/cuda_backend.cpp when the backend is built (cmake/MixpCuda.cmake), else by
// src/backend/cuda/off/cuda_unavailable.cpp, which throws saying how to build it.
#pragma once
#include <string>

#include "mixp/backend/backend.h"

namespace mixp::detail {
// The backend of cuda:index; throws "no CUDA device: ..." when that device is not there.
Backend& cuda_backend(int index);

// cuda:index's PCI bus id ("0000:65:00.0", cudaDeviceGetPCIBusId), for NVML
// (backend/nvml_energy.h); "" when the backend is not built. Throws as cuda_backend.
std::string cuda_pci_bus_id(int index);

// cuBLASLt is loaded on first use, not linked (src/backend/cuda/cublaslt_api.h). Whether this
// process has mapped it; false when the backend is not built.
bool cublaslt_mapped();
// Loads it (as the first GEMM would) and returns cublasLtGetStatusName(CUBLAS_STATUS_SUCCESS),
// which needs no GPU; throws what the load said. Throws as cuda_backend when not built.
std::string cublaslt_probe();
}  // namespace mixp::detail
