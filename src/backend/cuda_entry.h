// Internal: the CUDA backend's entry point for backend_for (backend.cpp). Defined by
// src/backend/cuda/cuda_backend.cpp when the backend is built (cmake/MixpCuda.cmake), else by
// src/backend/cuda/off/cuda_unavailable.cpp, which throws saying how to build it.
#pragma once
#include "mixp/backend/backend.h"

namespace mixp::detail {
// The backend of cuda:index; throws "no CUDA device: ..." when that device is not there.
Backend& cuda_backend(int index);
}  // namespace mixp::detail
