// The cpu backend's thread split for host loops outside the backend (the quant runtime,
// quant/*.h): host_parallel_for(n, work, f) calls f(lo, hi) on contiguous chunks of [0, n), one
// chunk per OpenMP thread when `work` (elements touched) is worth a parallel region, else
// f(0, n) on the calling thread. The same split as the backend's own loops
// (src/backend/cpu/cpu_parallel.h), so results do not depend on which side runs a loop. A
// narrow interface (docs/architecture.md 2.2): callers need neither omp.h nor backend/cpu/.
#pragma once
#include <cstdint>
#include <memory>
#include <type_traits>

namespace mixp {

// The type-erased form: fn(ctx, lo, hi) per chunk (one indirect call per chunk, not per element).
void host_parallel_for_fn(int64_t n, int64_t work, void (*fn)(void*, int64_t, int64_t),
                          void* ctx);

template <class F>
void host_parallel_for(int64_t n, int64_t work, F&& f) {
  using Fn = std::remove_reference_t<F>;
  host_parallel_for_fn(
      n, work, [](void* c, int64_t lo, int64_t hi) { (*static_cast<Fn*>(c))(lo, hi); },
      const_cast<void*>(static_cast<const void*>(std::addressof(f))));
}

}  // namespace mixp
