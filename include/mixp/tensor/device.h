// Where a tensor's storage lives. Only the CPU is implemented by this backend; the CUDA kind exists
// so that APIs carry the device from the start (docs/architecture.md 3.5, backends).
#pragma once
#include <cstdint>
#include <string>

namespace mixp {

enum class DeviceKind : uint8_t { cpu, cuda };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;
  static constexpr Device cpu() { return Device{DeviceKind::cpu, 0}; }
  static constexpr Device cuda(int i = 0) { return Device{DeviceKind::cuda, i}; }
  bool is_cpu() const { return kind == DeviceKind::cpu; }
  friend constexpr bool operator==(Device a, Device b) {
    return a.kind == b.kind && a.index == b.index;
  }
  std::string str() const {
    return kind == DeviceKind::cpu ? "cpu" : "cuda:" + std::to_string(index);
  }
};

}  // namespace mixp
