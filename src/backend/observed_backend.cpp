// ObservedBackend: each method reports its call to the kernel observers and forwards to the real
// backend (kernel_observer.h). FLOPs count 2 per multiply-add for the GEMM-like kernels and one
// per output element for the rest.
#include "backend/observed_backend.h"

#include <array>
#include <atomic>
#include <mutex>
#include <stdexcept>

#include "mixp/backend/kernel_observer.h"

namespace mixp {
namespace {

constexpr int kMaxObservers = 8;
std::mutex g_mutex;
std::array<std::atomic<KernelObserver*>, kMaxObservers> g_observers{};
std::atomic<bool> g_on{false};
thread_local KernelPhase t_phase = KernelPhase::forward;
thread_local int t_depth = 0;  // nesting of observed kernels on this thread

double numel_of(const Tensor& t) {
  return t.defined() ? double(t.numel()) : 0.0;
}

// Calls the observers around `fn` for the outermost kernel of a nest.
template <class F>
void observe(const char* kernel, const char* variant, std::initializer_list<const Tensor*> outs,
             std::initializer_list<const Tensor*> ins, double flops, F&& fn) {
  if (t_depth > 0) {
    fn();
    return;
  }
  std::array<const Tensor*, 8> o{}, i{};
  size_t no = 0, ni = 0;
  for (const Tensor* t : outs)
    if (t->defined() && no < o.size()) o[no++] = t;
  for (const Tensor* t : ins)
    if (t->defined() && ni < i.size()) i[ni++] = t;
  const KernelCall call{kernel, variant, std::span<const Tensor* const>(o.data(), no),
                        std::span<const Tensor* const>(i.data(), ni), flops};
  // The depth stays raised while the observers run, so the kernels they call themselves (a
  // statistic's conversion) are not observed.
  struct Depth {
    Depth() { ++t_depth; }
    ~Depth() { --t_depth; }
  } depth;
  for (auto& slot : g_observers)
    if (KernelObserver* ob = slot.load(std::memory_order_acquire)) ob->before(call);
  fn();
  for (auto& slot : g_observers)
    if (KernelObserver* ob = slot.load(std::memory_order_acquire)) ob->after(call);
}

// 2 * M * N * K for a (batched) matmul from dst [.., M, N] and a [.., M, K].
double matmul_flops(const Tensor& dst, const Tensor& a) {
  return 2.0 * numel_of(dst) * double(a.size(-1));
}

class ObservedBackend final : public Backend {
 public:
  explicit ObservedBackend(Backend& inner) : b_(inner) {}
  const char* name() const override { return b_.name(); }

  // Every kernel of the table: reported as its observe column says (OBS) or forwarded as is
  // (NOOBS).
#define MIXP_OBSERVE_OBS(kernel, variant, outs, ins, flops) \
  observe(kernel, variant, {MIXP_KT_UNPAREN outs}, {MIXP_KT_UNPAREN ins}, flops, fn)
#define MIXP_OBSERVE_NOOBS fn()
#define MIXP_KERNEL(name, kind, ref, cpu, cuda, params, args, observe) \
  void name params override {                                           \
    auto fn = [&] { b_.name args; };                                    \
    MIXP_OBSERVE_##observe;                                             \
  }
#define MIXP_KERNEL_QUERY(name) \
  bool name() const override { return b_.name(); }
#include "mixp/backend/kernels.def"
#undef MIXP_OBSERVE_OBS
#undef MIXP_OBSERVE_NOOBS

 private:
  Backend& b_;
};

}  // namespace

const char* to_string(KernelPhase p) {
  switch (p) {
    case KernelPhase::forward: return "forward";
    case KernelPhase::backward: return "backward";
    case KernelPhase::optimizer: return "optimizer";
    case KernelPhase::communication: return "communication";
    case KernelPhase::other: return "other";
  }
  return "?";
}

void add_kernel_observer(KernelObserver* o) {
  if (!o) throw std::invalid_argument("mixp::add_kernel_observer: null observer");
  std::lock_guard lock(g_mutex);
  for (auto& slot : g_observers)
    if (slot.load() == o) return;
  for (auto& slot : g_observers) {
    if (!slot.load()) {
      slot.store(o, std::memory_order_release);
      g_on.store(true, std::memory_order_release);
      return;
    }
  }
  throw std::invalid_argument("mixp::add_kernel_observer: at most 8 observers at once");
}

void remove_kernel_observer(KernelObserver* o) {
  std::lock_guard lock(g_mutex);
  bool any = false;
  for (auto& slot : g_observers) {
    if (slot.load() == o) slot.store(nullptr, std::memory_order_release);
    any = any || slot.load() != nullptr;
  }
  g_on.store(any, std::memory_order_release);
}

bool kernel_observers_on() {
  return g_on.load(std::memory_order_relaxed);
}

KernelPhase kernel_phase() {
  return t_phase;
}
void set_kernel_phase(KernelPhase p) {
  t_phase = p;
}

namespace detail {
Backend& observed_backend(Backend& inner, BackendKind kind) {
  static ObservedBackend* ref = nullptr;
  static ObservedBackend* cpu = nullptr;
  static std::once_flag once;
  std::call_once(once, [&] {
    ref = new ObservedBackend(get_backend(BackendKind::ref));
    cpu = new ObservedBackend(get_backend(BackendKind::cpu));
  });
  (void)inner;
  return kind == BackendKind::ref ? *ref : *cpu;
}
}  // namespace detail

}  // namespace mixp
