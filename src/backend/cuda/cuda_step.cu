// The training-step kernels: unscale + found-inf, the fp64 sum of squares, and the fused
// optimizer update (Adam/AdamW/SGD on fp32 values or masters, the narrow parameter's write-back
// with nearest-even or stochastic rounding, Kahan compensation, the weight shadow). The element
// rules are math/step_math.h; the roundings math/float_encode.h; both tested on the CPU.
#include "backend/cuda/cuda_elem.cuh"
#include "backend/cuda/math/step_math.h"

namespace mixp::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void unscale_kernel(void* g, Elem t, int64_t n, float inv, float* found_inf) {
  bool bad = false;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float v = load_f(g, t, i);
    bad = bad || cuda_math::non_finite(v);
    if (inv != 1.0f) store_rne(g, t, i, v * inv);
  }
  if (bad) *found_inf = 1.0f;  // every writer writes the same value
}

__global__ void sum_squares_partial(double* partial, const float* src, int64_t n) {
  __shared__ double buf[kThreads];
  double acc = 0.0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const double v = static_cast<double>(src[i]);
    acc += v * v;
  }
  buf[threadIdx.x] = acc;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = buf[0];
}
__global__ void sum_doubles(double* dst, const double* v, int n) {
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    double s = 0.0;
    for (int i = 0; i < n; ++i) s += v[i];
    *dst = s;
  }
}

__global__ void optimizer_kernel(const OptimArgs a) {
  using namespace cuda_math;
  const AdamF32 adam{a.s[0], a.s[1], a.s[2], a.s[3], a.s[4], a.s[5], a.s[6], a.s[7], a.s[8]};
  const SgdF32 sgd{a.s[0], a.s[1], a.s[2], a.s[3], a.sgd_first, a.sgd_nesterov, a.sgd_wd,
                   a.sgd_momentum};
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < a.n;
       i += int64_t{gridDim.x} * blockDim.x) {
    float w = a.w ? a.w[i] : load_f(a.param, a.param_type, i);
    const float old = w;
    const float g = load_f(a.g, a.g_type, i);
    if (a.adam) {
      adam_element(w, g, a.slot0[i], a.slot1[i], adam);
    } else {
      float unused = 0.0f;
      sgd_element(w, g, a.slot0 ? a.slot0[i] : unused, sgd);
    }
    if (a.w) a.w[i] = w;
    if (a.shadow) store_rne(a.shadow, a.shadow_type, i, w);
    if (!a.param) continue;
    const uint32_t r =
        a.write_back == Round::stochastic ? sr_bits(a.seed, a.offset + static_cast<uint64_t>(i)) : 0;
    if (!a.comp) {
      store_f(a.param, a.param_type, i, w, a.write_back, a.overflow, r);
      continue;
    }
    const float y = kahan_y(w, old, load_f(a.comp, a.param_type, i));
    store_f(a.param, a.param_type, i, old + y, a.write_back, a.overflow, r);
    const float p_new = load_f(a.param, a.param_type, i);
    store_f(a.comp, a.param_type, i, kahan_rem(y, p_new, old), Round::nearest_even,
            Overflow::saturate, 0);
  }
}

}  // namespace

void launch_unscale_check(void* g, Elem type, int64_t n, float inv, float* found_inf,
                          cudaStream_t stream) {
  if (n) unscale_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(g, type, n, inv, found_inf);
}

void launch_sum_squares(double* dst, const float* src, int64_t n, cudaStream_t stream) {
  constexpr int kBlocks = 256;  // fixed: the result does not depend on the grid (deterministic)
  double* partial = nullptr;
  // On failure the caller's launch check reports the error (cudaGetLastError).
  if (cudaMallocAsync(reinterpret_cast<void**>(&partial), kBlocks * sizeof(double), stream) !=
      cudaSuccess)
    return;
  sum_squares_partial<<<kBlocks, kThreads, 0, stream>>>(partial, src, n);
  sum_doubles<<<1, 1, 0, stream>>>(dst, partial, kBlocks);
  cudaFreeAsync(partial, stream);
}

void launch_optimizer_update(const OptimArgs& a, cudaStream_t stream) {
  if (a.n) optimizer_kernel<<<blocks_for(a.n, kThreads), kThreads, 0, stream>>>(a);
}

}  // namespace mixp::cuda
