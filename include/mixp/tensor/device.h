// Where a tensor's storage lives, and which backend computes on it (backend_for in
// backend/backend.h picks the backend from the tensors' device; docs/architecture.md 3.5).
//
// cpu: host memory, the ref/cpu backends. guarded: host memory that only a backend call may touch
// (Tensor::data_ptr throws outside one, naming the caller): the test device that proves every
// computation goes through the backend (tests/engine/test_guarded_device.cpp). cuda: NVIDIA GPU
// memory and the CUDA backend, when built (backend/cuda.h, docs/cuda.md).
#pragma once
#include <cstdint>
#include <string>

namespace mixp {

enum class DeviceKind : uint8_t { cpu, cuda, guarded };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;
  static constexpr Device cpu() { return Device{DeviceKind::cpu, 0}; }
  static constexpr Device cuda(int i = 0) { return Device{DeviceKind::cuda, i}; }
  static constexpr Device guarded() { return Device{DeviceKind::guarded, 0}; }
  bool is_cpu() const { return kind == DeviceKind::cpu; }
  // Whether the CPU can read the memory directly (cpu and guarded).
  bool is_host_memory() const { return kind != DeviceKind::cuda; }
  friend constexpr bool operator==(Device a, Device b) {
    return a.kind == b.kind && a.index == b.index;
  }
  std::string str() const {
    switch (kind) {
      case DeviceKind::cpu:
        return "cpu";
      case DeviceKind::guarded:
        return "guarded";
      case DeviceKind::cuda:
        break;
    }
    return "cuda:" + std::to_string(index);
  }
};

// The device new tensors get when their TensorOptions name none: cpu, or the device of the
// innermost DefaultDeviceGuard on this thread (torch.set_default_device). Ops put their results
// (and autograd its gradients) on their inputs' device, whatever the default.
Device default_device();
class DefaultDeviceGuard {
 public:
  explicit DefaultDeviceGuard(Device d);
  ~DefaultDeviceGuard();
  DefaultDeviceGuard(const DefaultDeviceGuard&) = delete;
  DefaultDeviceGuard& operator=(const DefaultDeviceGuard&) = delete;

 private:
  Device prev_;
};

// Device memory access on this thread: a backend opens a scope around each kernel; a guarded
// tensor's data_ptr() works only inside one. The host-access paths (Tensor::to(Device),
// item(), at(), to_vector(), str()) open one for their copy to the host, so they are the
// explicit, greppable way for host code to read device data.
class DeviceAccessScope {
 public:
  DeviceAccessScope();
  ~DeviceAccessScope();
  DeviceAccessScope(const DeviceAccessScope&) = delete;
  DeviceAccessScope& operator=(const DeviceAccessScope&) = delete;
};
bool device_access_open();

}  // namespace mixp
