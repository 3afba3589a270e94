// Internal: splits [0, n) into one contiguous chunk per OpenMP thread when n is large enough to
// pay for the parallel region (the same grain as the cpu backend's loops); f(lo, hi) runs each.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace mixp::optim {

inline constexpr int64_t kOptimParallelGrain = 1 << 15;

template <class F>
void parallel_loop(int64_t n, F&& f) {
  if (n < kOptimParallelGrain || omp_get_max_threads() == 1) {
    if (n > 0) f(int64_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    // Chunks are multiples of 16 elements so that every thread's loop starts on a cache line.
    const int64_t chunk = ((n + nt - 1) / nt + 15) / 16 * 16;
    const int64_t lo = std::min<int64_t>(n, t * chunk), hi = std::min<int64_t>(n, lo + chunk);
    if (lo < hi) f(lo, hi);
  }
}

}  // namespace mixp::optim
