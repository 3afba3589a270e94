// The energy of an NVIDIA GPU from NVML's board counter (nvmlDeviceGetTotalEnergyConsumption,
// millijoules since the driver was loaded; Volta and newer), for runs that train on a cuda
// device (`mixp compare --device cuda`: energy_source "nvml", shown as measured). NVML is loaded
// at run time with dlopen("libnvidia-ml.so.1"), so no mixp binary links the driver's library and
// a machine without it simply reports the meter unavailable with the reason. The CUDA device is
// found in NVML by its PCI bus id (the two number GPUs differently) when the CUDA backend is
// built, else by index. What it counts: the whole board (GPU and its memory), every process on
// it, over the time between start() and joules().
#pragma once
#include <optional>
#include <string>

namespace mixp {

class NvmlEnergyMeter {
 public:
  // cuda:device_index. Never throws: without NVML, the device or the counter, available() is
  // false and unavailable_reason() says why.
  explicit NvmlEnergyMeter(int device_index);
  bool available() const { return available_; }
  const std::string& unavailable_reason() const { return reason_; }
  // Starts measuring from the counter's current value.
  void start();
  // Joules since start(); nullopt when unavailable (or the counter could not be read).
  std::optional<double> joules();

 private:
  void* device_ = nullptr;  // nvmlDevice_t
  bool available_ = false;
  std::string reason_;
  unsigned long long start_mj_ = 0;
};

}  // namespace mixp
