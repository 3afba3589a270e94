// NvmlEnergyMeter; see include/mixp/backend/nvml_energy.h. The few NVML entry points it needs are
// declared here (the driver's nvml.h is not needed to build), with NVML's ABI: nvmlReturn_t is an
// int (0 = NVML_SUCCESS), nvmlDevice_t an opaque pointer.
#include "mixp/backend/nvml_energy.h"

#include <dlfcn.h>

#include <mutex>

#include "backend/cuda_entry.h"

namespace mixp {

namespace {

using NvmlDevice = void*;
struct Nvml {
  bool loaded = false;
  std::string reason;
  int (*init)() = nullptr;
  const char* (*error_string)(int) = nullptr;
  int (*by_index)(unsigned, NvmlDevice*) = nullptr;
  int (*by_pci)(const char*, NvmlDevice*) = nullptr;
  int (*energy)(NvmlDevice, unsigned long long*) = nullptr;
};

std::string error_of(const Nvml& n, int rc) {
  const char* s = n.error_string ? n.error_string(rc) : nullptr;
  return s ? std::string(s) : "NVML error " + std::to_string(rc);
}

// Loaded and initialised once per process (nvmlInit is reference counted; never shut down).
const Nvml& nvml() {
  static const Nvml n = [] {
    Nvml r;
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      r.reason = "libnvidia-ml.so.1 not found (no NVIDIA driver)";
      return r;
    }
    auto sym = [&](const char* name) { return dlsym(lib, name); };
    r.init = reinterpret_cast<int (*)()>(sym("nvmlInit_v2"));
    r.error_string = reinterpret_cast<const char* (*)(int)>(sym("nvmlErrorString"));
    r.by_index =
        reinterpret_cast<int (*)(unsigned, NvmlDevice*)>(sym("nvmlDeviceGetHandleByIndex_v2"));
    r.by_pci = reinterpret_cast<int (*)(const char*, NvmlDevice*)>(
        sym("nvmlDeviceGetHandleByPciBusId_v2"));
    r.energy = reinterpret_cast<int (*)(NvmlDevice, unsigned long long*)>(
        sym("nvmlDeviceGetTotalEnergyConsumption"));
    if (!r.init || !r.by_index || !r.energy) {
      r.reason =
          "libnvidia-ml.so.1 lacks nvmlInit_v2, nvmlDeviceGetHandleByIndex_v2 or "
          "nvmlDeviceGetTotalEnergyConsumption (driver too old)";
      return r;
    }
    const int rc = r.init();
    if (rc != 0) {
      r.reason = "nvmlInit failed: " + error_of(r, rc);
      return r;
    }
    r.loaded = true;
    return r;
  }();
  return n;
}

}  // namespace

NvmlEnergyMeter::NvmlEnergyMeter(int device_index) {
  const Nvml& n = nvml();
  if (!n.loaded) {
    reason_ = n.reason;
    return;
  }
  std::string bus;
  try {
    bus = detail::cuda_pci_bus_id(device_index);
  } catch (const std::exception&) {
    bus.clear();  // no CUDA backend or device: fall back to the index
  }
  NvmlDevice dev = nullptr;
  int rc = !bus.empty() && n.by_pci ? n.by_pci(bus.c_str(), &dev)
                                    : n.by_index(static_cast<unsigned>(device_index), &dev);
  if (rc != 0) {
    reason_ =
        "NVML has no device for cuda:" + std::to_string(device_index) + ": " + error_of(n, rc);
    return;
  }
  unsigned long long mj = 0;
  rc = n.energy(dev, &mj);
  if (rc != 0) {
    reason_ = "nvmlDeviceGetTotalEnergyConsumption: " + error_of(n, rc) +
              " (the GPU has no energy counter: needs Volta or newer)";
    return;
  }
  device_ = dev;
  available_ = true;
  start_mj_ = mj;
}

void NvmlEnergyMeter::start() {
  if (!available_) return;
  unsigned long long mj = 0;
  if (nvml().energy(device_, &mj) == 0) start_mj_ = mj;
}

std::optional<double> NvmlEnergyMeter::joules() {
  if (!available_) return std::nullopt;
  unsigned long long mj = 0;
  if (nvml().energy(device_, &mj) != 0 || mj < start_mj_) return std::nullopt;
  return static_cast<double>(mj - start_mj_) / 1000.0;
}

}  // namespace mixp
