// OpenMP helpers of the cpu backend (internal).
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "backend/kernel_util.h"
#include "mixp/tensor/tensor.h"

namespace mixp::cpu {

// Below this many elements of work a parallel region costs more than it saves.
inline constexpr int64_t kParallelGrain = 1 << 15;

inline bool parallel_worth(int64_t work) {
  return work >= kParallelGrain && omp_get_max_threads() > 1;
}

// Splits [0, n) into one contiguous chunk per thread when `work` (elements touched) is large
// enough; f(lo, hi).
template <class F>
void parallel_for(int64_t n, int64_t work, F&& f) {
  if (n <= 1 || !parallel_worth(work)) {
    if (n > 0) f(int64_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t chunk = (n + nt - 1) / nt;
    const int64_t lo = std::min<int64_t>(n, t * chunk), hi = std::min<int64_t>(n, lo + chunk);
    if (lo < hi) f(lo, hi);
  }
}

// An fp32 contiguous tensor, or none (an absent optional operand): the layout of the fast paths.
inline bool f32c(const Tensor& t) {
  return !t.defined() || (t.dtype() == DType::fp32 && t.is_contiguous());
}
inline float* fp(const Tensor& t) {
  return t.defined() ? static_cast<float*>(t.data_ptr()) : nullptr;
}

using kern::view_of;

}  // namespace mixp::cpu
