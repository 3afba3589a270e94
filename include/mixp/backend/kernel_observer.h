// Kernel observers: code that watches every backend kernel call (docs/inspect.md). The op
// profiler (time, FLOPs, bytes per kernel and dtype) and the NaN/Inf origin detector of the
// inspect module are observers; the backend knows nothing of them.
//
// Cost when no observer is installed: backend() reads one relaxed atomic flag and returns the
// plain backend, so the kernels run exactly as without this header. With one installed, backend()
// returns a forwarding backend that calls every observer's before() and after() around the
// kernel. Only the outermost kernel of a nest is reported (a kernel that calls backend() itself,
// e.g. a layout copy inside conv2d, is part of its caller's time).
//
// Observers run on the calling (training) thread; an exception thrown by after() propagates out
// of the op that called the kernel (the anomaly detector stops a run this way).
#pragma once
#include <cstdint>
#include <span>

#include "mixp/tensor/tensor.h"

namespace mixp {

// Which part of a training step a kernel belongs to. The autograd engine sets `backward` while it
// runs; the Trainer's inspection callbacks set forward / optimizer; a data-parallel all-reduce
// sets communication.
enum class KernelPhase : uint8_t { forward, backward, optimizer, communication, other };
const char* to_string(KernelPhase p);

// One kernel call. Pointers are valid during before()/after() only.
struct KernelCall {
  const char* kernel = "";   // the Backend method: "matmul", "unary", "convert", ...
  const char* variant = "";  // the operation inside it: "gelu", "add", "sum", or ""
  std::span<const Tensor* const> outputs;  // what the kernel writes (defined ones only)
  std::span<const Tensor* const> inputs;   // what it reads (defined ones only)
  double flops = 0;  // floating-point operations (2 per multiply-add; 1 per element otherwise)
};

class KernelObserver {
 public:
  virtual ~KernelObserver() = default;
  virtual void before(const KernelCall& call) { (void)call; }
  virtual void after(const KernelCall& call) { (void)call; }
};

// Installs / removes an observer (process-wide; not owned). At most 8 at once.
void add_kernel_observer(KernelObserver* o);
void remove_kernel_observer(KernelObserver* o);
// True while any observer is installed (one relaxed load).
bool kernel_observers_on();

// This thread's phase (default forward).
KernelPhase kernel_phase();
void set_kernel_phase(KernelPhase p);
// Sets the phase for its lifetime and restores the previous one.
class KernelPhaseScope {
 public:
  explicit KernelPhaseScope(KernelPhase p) : prev_(kernel_phase()) { set_kernel_phase(p); }
  ~KernelPhaseScope() { set_kernel_phase(prev_); }
  KernelPhaseScope(const KernelPhaseScope&) = delete;
  KernelPhaseScope& operator=(const KernelPhaseScope&) = delete;

 private:
  KernelPhase prev_;
};

}  // namespace mixp
