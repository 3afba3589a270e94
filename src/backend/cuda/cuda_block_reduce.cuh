// The row kernels' block reduction (cuda_rows.cu, cuda_norm.cu): one block per row, kThreads
// threads, a shared-memory tree in a fixed order (so a row's sum does not depend on timing).
#pragma once
#include "backend/cuda/cuda_elem.cuh"

namespace mixp::cuda {

constexpr int kThreads = 256;

// Sum (or max) of v over the block; every thread gets the result.
template <bool kMax>
__device__ float block_reduce(float v) {
  __shared__ float buf[kThreads];
  buf[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      const float o = buf[threadIdx.x + s];
      buf[threadIdx.x] = kMax ? (o > buf[threadIdx.x] || o != o ? o : buf[threadIdx.x])
                              : buf[threadIdx.x] + o;
    }
    __syncthreads();
  }
  const float r = buf[0];
  __syncthreads();
  return r;
}

}  // namespace mixp::cuda
