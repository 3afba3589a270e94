// NVIDIA GPU discovery through the CUDA driver API, loaded at run time with dlopen so that mixp
// builds and runs without CUDA and still reports the GPUs where a driver is installed.
// Signatures and attribute numbers are those of cuda.h (stable driver ABI since CUDA 4).
#include <dlfcn.h>

#include <cstdlib>
#include <string>

#include "mixp/backend/platform.h"

namespace mixp {
namespace {

using CUresult = int;
using CUdevice = int;
constexpr int kAttrMultiprocessors = 16;  // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
constexpr int kAttrCcMajor = 75;          // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
constexpr int kAttrCcMinor = 76;          // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR

struct DriverApi {
  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuDriverGetVersion)(int*) = nullptr;
  CUresult (*cuDeviceGetCount)(int*) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuDeviceGetName)(char*, int, CUdevice) = nullptr;
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice) = nullptr;
  CUresult (*cuDeviceTotalMem)(size_t*, CUdevice) = nullptr;  // the _v2 (size_t) entry point
  CUresult (*cuGetErrorName)(CUresult, const char**) = nullptr;
};

template <class F>
bool load(void* lib, const char* sym, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, sym));
  return fn != nullptr;
}

std::string error_name(const DriverApi& api, CUresult r) {
  const char* s = nullptr;
  if (api.cuGetErrorName && api.cuGetErrorName(r, &s) == 0 && s) return s;
  return "CUDA error " + std::to_string(r);
}

GpuProbe probe() {
  GpuProbe p;
  // MIXP_LIBCUDA names another driver library (unusual installs); the default is the soname the
  // NVIDIA driver installs. The handle is never closed: unloading the driver is not supported.
  const char* env = std::getenv("MIXP_LIBCUDA");
  const char* path = env && *env ? env : "libcuda.so.1";
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    p.status = std::string("no NVIDIA driver found (") + path + " could not be loaded)";
    return p;
  }
  DriverApi api;
  const bool ok = load(lib, "cuInit", api.cuInit) &&
                  load(lib, "cuDriverGetVersion", api.cuDriverGetVersion) &&
                  load(lib, "cuDeviceGetCount", api.cuDeviceGetCount) &&
                  load(lib, "cuDeviceGet", api.cuDeviceGet) &&
                  load(lib, "cuDeviceGetName", api.cuDeviceGetName) &&
                  load(lib, "cuDeviceGetAttribute", api.cuDeviceGetAttribute) &&
                  load(lib, "cuDeviceTotalMem_v2", api.cuDeviceTotalMem);
  load(lib, "cuGetErrorName", api.cuGetErrorName);
  if (!ok) {
    p.status = std::string("NVIDIA driver library ") + path + " lacks the driver API entry points";
    return p;
  }
  if (const CUresult r = api.cuInit(0); r != 0) {
    p.status = "NVIDIA driver found, but cuInit failed: " + error_name(api, r);
    return p;
  }
  p.driver_found = true;
  api.cuDriverGetVersion(&p.driver_version);
  int count = 0;
  if (const CUresult r = api.cuDeviceGetCount(&count); r != 0) {
    p.status = "NVIDIA driver found, but cuDeviceGetCount failed: " + error_name(api, r);
    return p;
  }
  for (int i = 0; i < count; ++i) {
    CUdevice dev = 0;
    if (api.cuDeviceGet(&dev, i) != 0) continue;
    GpuInfo g;
    g.index = i;
    char name[256] = {};
    if (api.cuDeviceGetName(name, sizeof(name) - 1, dev) == 0) g.name = name;
    api.cuDeviceGetAttribute(&g.cc_major, kAttrCcMajor, dev);
    api.cuDeviceGetAttribute(&g.cc_minor, kAttrCcMinor, dev);
    api.cuDeviceGetAttribute(&g.multiprocessors, kAttrMultiprocessors, dev);
    size_t bytes = 0;
    if (api.cuDeviceTotalMem(&bytes, dev) == 0) g.memory_bytes = bytes;
    p.gpus.push_back(std::move(g));
  }
  const int v = p.driver_version;
  p.status = "NVIDIA driver (CUDA " + std::to_string(v / 1000) + "." +
             std::to_string((v % 1000) / 10) + "), " + std::to_string(p.gpus.size()) +
             (p.gpus.size() == 1 ? " GPU" : " GPUs");
  return p;
}

}  // namespace

const GpuProbe& probe_gpus() {
  static const GpuProbe p = probe();
  return p;
}

}  // namespace mixp
