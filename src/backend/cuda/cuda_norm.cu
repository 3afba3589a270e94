// The normalization family on cuda: LayerNorm, its backward and its 16-bit save. One block per
// row (cuda_block_reduce.cuh); the arithmetic is the ref backend's (backend/math/norm_math.h) in
// fp32, each block's threads walking the row with a stride of blockDim.x. tests/cuda runs the same
// math on the CPU against the ref backend (test_cuda_norm_math.cpp).
#include "backend/cuda/cuda_block_reduce.cuh"
#include "backend/math/norm_math.h"

namespace mixp::cuda {
namespace {

__device__ inline kern::RowLoop block_row(int64_t n) {
  return kern::RowLoop{n, static_cast<int64_t>(threadIdx.x), static_cast<int64_t>(blockDim.x)};
}

__global__ void layer_norm_kernel(float* dst, float* mean, float* rstd, const float* src,
                                  const float* w, const float* b, int64_t rows, int64_t n,
                                  float eps) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* x = src + r * n;
    float mu = 0.0f, rs = 0.0f;
    kern::layer_norm_row(
        block_row(n), eps, [&](int64_t j) { return x[j]; }, w != nullptr,
        [&](int64_t j) { return w[j]; }, b != nullptr, [&](int64_t j) { return b[j]; },
        [&](int64_t j, float v) { dst[r * n + j] = v; },
        [](float v) { return block_reduce<false>(v); }, mu, rs);
    if (threadIdx.x == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
  }
}

__global__ void layer_norm_backward_kernel(float* dsrc, const float* ddst, const float* src,
                                           const float* w, const float* mean, const float* rstd,
                                           int64_t rows, int64_t n) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* x = src + r * n;
    const float* g = ddst + r * n;
    kern::layer_norm_backward_row(
        block_row(n), mean[r], rstd[r], [&](int64_t j) { return x[j]; },
        [&](int64_t j) { return g[j]; }, w != nullptr, [&](int64_t j) { return w[j]; },
        [](int64_t, float, float) {},  // dweight, dbias: layer_norm_params_kernel
        [&](int64_t j, float v) { dsrc[r * n + j] = v; },
        [](float v) { return block_reduce<false>(v); });
  }
}

// dweight[j] = sum_r dy * xhat, dbias[j] = sum_r dy: one thread per column, rows in order.
__global__ void layer_norm_params_kernel(float* dw, float* db, const float* ddst, const float* src,
                                         const float* mean, const float* rstd, int64_t rows,
                                         int64_t n) {
  MIXP_GRID_STRIDE(j, n) {
    float sw = 0.0f, sb = 0.0f;
    for (int64_t r = 0; r < rows; ++r) {
      const float g = ddst[r * n + j];
      sw += g * kern::layer_norm_xhat(src[r * n + j], mean[r], rstd[r]);
      sb += g;
    }
    if (dw) dw[j] = sw;
    if (db) db[j] = sb;
  }
}

__global__ void layer_norm_xhat_kernel(void* dst, Elem t, const float* src, const float* mean,
                                       const float* rstd, int64_t rows, int64_t n) {
  MIXP_GRID_STRIDE(i, rows * n) {
    const int64_t r = i / n;
    store_rne(dst, t, i, kern::layer_norm_xhat(src[i], mean[r], rstd[r]));
  }
}

}  // namespace

void launch_layer_norm(float* dst, float* mean, float* rstd, const float* src, const float* weight,
                       const float* bias, int64_t rows, int64_t n, float eps, cudaStream_t stream) {
  if (rows)
    layer_norm_kernel<<<blocks_for(rows, 1), kThreads, 0, stream>>>(dst, mean, rstd, src, weight,
                                                                    bias, rows, n, eps);
}
void launch_layer_norm_backward(float* dsrc, float* dweight, float* dbias, const float* ddst,
                                const float* src, const float* weight, const float* mean,
                                const float* rstd, int64_t rows, int64_t n, cudaStream_t stream) {
  if (rows)
    layer_norm_backward_kernel<<<blocks_for(rows, 1), kThreads, 0, stream>>>(
        dsrc, ddst, src, weight, mean, rstd, rows, n);
  if (dweight || dbias)
    layer_norm_params_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
        dweight, dbias, ddst, src, mean, rstd, rows, n);
}
void launch_layer_norm_xhat(void* dst, Elem dst_type, const float* src, const float* mean,
                            const float* rstd, int64_t rows, int64_t n, cudaStream_t stream) {
  if (rows * n != 0)
    layer_norm_xhat_kernel<<<blocks_for(rows * n, kThreads), kThreads, 0, stream>>>(
        dst, dst_type, src, mean, rstd, rows, n);
}

}  // namespace mixp::cuda
