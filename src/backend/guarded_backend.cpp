// GuardedBackend: the backend of the guarded test device (tensor/device.h). Its memory is host
// memory that only a backend call may touch: every method opens a DeviceAccessScope and forwards
// to the host backend of this thread (backend(): cpu or ref, observed when an observer is on), so
// results are bit-identical to the cpu device while any computation outside a backend call fails
// at its data_ptr(). tests/engine/test_guarded_device.cpp trains on it.
#include "backend/guarded_backend.h"

namespace mixp::detail {
namespace {

class GuardedBackend final : public Backend {
 public:
  const char* name() const override { return "guarded"; }

  // Runs one kernel of the host backend with the guarded memory open to it.
  template <class F>
  static void run(F&& kernel) {
    const DeviceAccessScope in_kernel;
    kernel(backend());
  }

  // Every kernel of the table, forwarded to the host backend inside the scope.
#define MIXP_KERNEL(name, kind, ref, cpu, cuda, params, args, observe) \
  void name params override {                                           \
    run([&](Backend& be) { be.name args; });                            \
  }
#define MIXP_KERNEL_QUERY(name) \
  bool name() const override { return backend().name(); }
#include "mixp/backend/kernels.def"
};

}  // namespace

Backend& guarded_backend() {
  static GuardedBackend* b = new GuardedBackend();
  return *b;
}

}  // namespace mixp::detail
