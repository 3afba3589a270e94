// The forwarding backend that reports every kernel to the kernel observers
// (mixp/backend/kernel_observer.h). backend() returns it only while an observer is installed.
#pragma once
#include "mixp/backend/backend.h"

namespace mixp::detail {

// The forwarding backend over `inner` (the ref or the cpu backend).
Backend& observed_backend(Backend& inner, BackendKind kind);

}  // namespace mixp::detail
