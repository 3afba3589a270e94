// cuBLASLt loaded with dlopen on first use: src/backend/cuda/cublaslt_api.h says why.
#include "backend/cuda/cublaslt_api.h"

#include "backend/cuda_entry.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <fstream>
#include <stdexcept>
#include <string>

namespace mixp::cuda {
namespace {

// MIXP_CUBLASLT_PATH: the library the build found, by its versioned name (cmake/MixpCuda.cmake);
// MIXP_CUBLASLT_SONAME: the same name for the dynamic loader's own search (LD_LIBRARY_PATH,
// ld.so.conf) when the toolkit has moved since the build.
CublasLtApi load() {
  std::string why;
  void* handle = nullptr;
  for (const char* name : {MIXP_CUBLASLT_PATH, MIXP_CUBLASLT_SONAME}) {
    handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (handle) break;
    const char* err = dlerror();
    why += fmt::format("{}{}", why.empty() ? "" : "; ", err ? err : name);
  }
  if (!handle) {
    throw std::runtime_error(fmt::format(
        "mixp: cannot load cuBLASLt ({}), which the CUDA backend needs for its GEMMs: install "
        "the CUDA toolkit's cuBLASLt of the version mixp was built with, or put its folder on "
        "LD_LIBRARY_PATH (docs/cuda.md)", why));
  }
  CublasLtApi api;
#define MIXP_CUBLASLT_RESOLVE(name)                                                           \
  api.name = reinterpret_cast<decltype(api.name)>(dlsym(handle, #name));                      \
  if (!api.name)                                                                              \
    throw std::runtime_error(fmt::format("mixp: the cuBLASLt loaded from {} has no {}: it is "  \
                                         "older than the toolkit mixp was built with "        \
                                         "(docs/cuda.md)", MIXP_CUBLASLT_PATH, #name));
  MIXP_CUBLASLT_FUNCTIONS(MIXP_CUBLASLT_RESOLVE)
#undef MIXP_CUBLASLT_RESOLVE
  return api;  // the handle stays open for the life of the process
}

}  // namespace

const CublasLtApi& lt() {
  static const CublasLtApi api = load();
  return api;
}

bool mapped() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find("libcublasLt.so") != std::string::npos) return true;
  return false;
}

}  // namespace mixp::cuda

namespace mixp::detail {
bool cublaslt_mapped() {
  return cuda::mapped();
}
std::string cublaslt_probe() {
  return cuda::lt().cublasLtGetStatusName(CUBLAS_STATUS_SUCCESS);
}
}  // namespace mixp::detail
