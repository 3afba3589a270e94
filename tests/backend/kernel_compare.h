// The two backends the kernel tests of this folder compare: the cpu backend's loops against the
// ref backend's (src/backend/ref/), bypassing the per-thread BackendGuard.
#pragma once
#include <string>

#include "mixp/backend/backend.h"

namespace mixp::test {

inline Backend& ref_backend() {
  return get_backend(BackendKind::ref);
}
inline Backend& cpu_backend() {
  return get_backend(BackendKind::cpu);
}

}  // namespace mixp::test
