// The default device of new tensors and the device-access scope (tensor/device.h).
#include "mixp/tensor/device.h"

namespace mixp {
namespace {
thread_local Device t_default = Device::cpu();
thread_local int t_access_depth = 0;  // open DeviceAccessScopes on this thread
}  // namespace

Device default_device() {
  return t_default;
}
DefaultDeviceGuard::DefaultDeviceGuard(Device d) : prev_(t_default) {
  t_default = d;
}
DefaultDeviceGuard::~DefaultDeviceGuard() {
  t_default = prev_;
}

DeviceAccessScope::DeviceAccessScope() {
  ++t_access_depth;
}
DeviceAccessScope::~DeviceAccessScope() {
  --t_access_depth;
}
bool device_access_open() {
  return t_access_depth > 0;
}

}  // namespace mixp
