// The cnn's kernels on cuda: max/avg pooling and their gradients (gathered per input element in
// the ref's order, no atomics), im2col / col2im and the bias of the GEMM convolution, batch norm
// (double sums, one block per channel), reduce_max_backward. Element rules: math/nn_math.h,
// tested against the ref backend on the CPU.
#include "backend/cuda/cuda_elem.cuh"
#include "backend/cuda/cuda_nn_kernels.h"

namespace mixp::cuda {
namespace {

using namespace cuda_math;
constexpr int kThreads = 256;

__global__ void max_pool_kernel(void* dst, const void* src, Elem t, PoolShape p) {
  MIXP_GRID_STRIDE(i, p.N * p.C * p.OH * p.OW) {
    const int64_t ow = i % p.OW, oh = (i / p.OW) % p.OH, plane = i / (p.OW * p.OH);
    const int64_t base = plane * p.H * p.W;
    store_rne(dst, t, i, max_pool_at(p, oh, ow, [&](int64_t h, int64_t w) {
                return load_f(src, t, base + h * p.W + w);
              }));
  }
}
__global__ void max_pool_backward_kernel(void* dsrc, const void* ddst, const void* src, Elem t,
                                         PoolShape p) {
  MIXP_GRID_STRIDE(i, p.N * p.C * p.H * p.W) {
    const int64_t w = i % p.W, h = (i / p.W) % p.H, plane = i / (p.W * p.H);
    const int64_t xb = plane * p.H * p.W, gb = plane * p.OH * p.OW;
    const float v = max_pool_grad_at(
        p, h, w, [&](int64_t oh, int64_t ow) { return load_f(ddst, t, gb + oh * p.OW + ow); },
        [&](int64_t hh, int64_t ww) { return load_f(src, t, xb + hh * p.W + ww); });
    store_rne(dsrc, t, i, v);
  }
}
__global__ void avg_pool_kernel(void* dst, const void* src, Elem t, PoolShape p) {
  MIXP_GRID_STRIDE(i, p.N * p.C * p.OH * p.OW) {
    const int64_t ow = i % p.OW, oh = (i / p.OW) % p.OH, plane = i / (p.OW * p.OH);
    const int64_t base = plane * p.H * p.W;
    const double v = avg_pool_at(
        p, oh, ow, [&](int64_t h, int64_t w) { return load_f(src, t, base + h * p.W + w); });
    store_rne(dst, t, i, static_cast<float>(v));
  }
}
__global__ void avg_pool_backward_kernel(void* dsrc, const void* ddst, Elem t, PoolShape p) {
  MIXP_GRID_STRIDE(i, p.N * p.C * p.H * p.W) {
    const int64_t w = i % p.W, h = (i / p.W) % p.H, plane = i / (p.W * p.H);
    const int64_t gb = plane * p.OH * p.OW;
    store_rne(dsrc, t, i, avg_pool_grad_at(p, h, w, [&](int64_t oh, int64_t ow) {
                return load_f(ddst, t, gb + oh * p.OW + ow);
              }));
  }
}

__global__ void im2col_kernel(void* col, Elem ct, const void* src, Elem st, ConvShape g) {
  const int64_t rows = g.C * g.KH * g.KW, cols = g.OH * g.OW;
  MIXP_GRID_STRIDE(i, g.N * rows * cols) {
    const int64_t s = i % cols, r = (i / cols) % rows, n = i / (cols * rows);
    int64_t c, h, w;
    const float v = im2col_source(g, r, s, c, h, w)
                        ? load_f(src, st, ((n * g.C + c) * g.H + h) * g.W + w)
                        : 0.0f;
    store_rne(col, ct, i, v);
  }
}
__global__ void col2im_kernel(void* dsrc, Elem t, const float* dcol, ConvShape g) {
  const int64_t rows = g.C * g.KH * g.KW, cols = g.OH * g.OW;
  MIXP_GRID_STRIDE(i, g.N * g.C * g.H * g.W) {
    const int64_t w = i % g.W, h = (i / g.W) % g.H, c = (i / (g.W * g.H)) % g.C,
                  n = i / (g.W * g.H * g.C);
    const float* d = dcol + n * rows * cols;
    store_rne(dsrc, t, i,
              col2im_at(g, c, h, w, [&](int64_t r, int64_t s) { return d[r * cols + s]; }));
  }
}
__global__ void conv_bias_kernel(void* dst, Elem t, const float* y32, const void* bias, Elem bt,
                                 int64_t N, int64_t O, int64_t S) {
  MIXP_GRID_STRIDE(i, N * O * S) {
    const float b = bias ? load_f(bias, bt, (i / S) % O) : 0.0f;
    store_rne(dst, t, i, bias ? y32[i] + b : y32[i]);
  }
}

// Block reduction of doubles (kThreads threads).
__device__ double block_sum(double v, double* buf) {
  buf[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  const double r = buf[0];
  __syncthreads();
  return r;
}

// One block per channel: statistics (training) or the running ones, then the normalization.
__global__ void batch_norm_kernel(BatchNormArgs a) {
  __shared__ double buf[kThreads];
  const int64_t c = blockIdx.x, per = a.N * a.S;
  auto at = [&](int64_t j) { return (j / a.S * a.C + c) * a.S + j % a.S; };
  double mean, invstd;
  if (a.training) {
    double s = 0;
    for (int64_t j = threadIdx.x; j < per; j += kThreads) s += a.src[at(j)];
    const double sum = block_sum(s, buf);
    const double m = sum / static_cast<double>(per);
    double q = 0;
    for (int64_t j = threadIdx.x; j < per; j += kThreads) {
      const double x = a.src[at(j)] - m;
      q += x * x;
    }
    const BnStats st = bn_stats(sum, block_sum(q, buf), static_cast<double>(per), a.eps);
    mean = st.mean;
    invstd = st.invstd;
    if (threadIdx.x == 0) {
      a.save_mean[c] = static_cast<float>(st.mean);
      a.save_invstd[c] = static_cast<float>(st.invstd);
      if (a.running_mean)
        a.running_mean[c] = static_cast<float>(bn_running(a.running_mean[c], a.momentum, st.mean));
      if (a.running_var)
        a.running_var[c] =
            static_cast<float>(bn_running(a.running_var[c], a.momentum, st.unbiased));
    }
  } else {
    mean = a.running_mean[c];
    invstd = 1.0 / std::sqrt(static_cast<double>(a.running_var[c]) + a.eps);
  }
  const double w = a.weight ? a.weight[c] : 1.0, b = a.bias ? a.bias[c] : 0.0;
  for (int64_t j = threadIdx.x; j < per; j += kThreads)
    a.dst[at(j)] = static_cast<float>(bn_forward(a.src[at(j)], mean, invstd, w, b));
}
__global__ void batch_norm_backward_kernel(BatchNormArgs a) {
  __shared__ double buf[kThreads];
  const int64_t c = blockIdx.x, per = a.N * a.S;
  auto at = [&](int64_t j) { return (j / a.S * a.C + c) * a.S + j % a.S; };
  const double m = a.save_mean[c], invstd = a.save_invstd[c];
  const double w = a.weight ? a.weight[c] : 1.0;
  double sg = 0, sgx = 0;
  for (int64_t j = threadIdx.x; j < per; j += kThreads) {
    const double g = a.ddst[at(j)];
    sg += g;
    sgx += g * (a.src[at(j)] - m) * invstd;
  }
  const double sum_g = block_sum(sg, buf), sum_g_xhat = block_sum(sgx, buf);
  const double cnt = static_cast<double>(per);
  for (int64_t j = threadIdx.x; j < per; j += kThreads)
    a.dsrc[at(j)] = static_cast<float>(
        bn_backward(a.src[at(j)], a.ddst[at(j)], m, invstd, w, cnt, sum_g, sum_g_xhat));
  if (threadIdx.x == 0) {
    if (a.dweight) a.dweight[c] = static_cast<float>(sum_g_xhat);
    if (a.dbias) a.dbias[c] = static_cast<float>(sum_g);
  }
}

__global__ void max_count_kernel(MaxBackwardArgs a, float* count) {
  MIXP_GRID_STRIDE(i, a.shape.numel()) {
    const float s = load_f(a.src.data, a.src.type, offset_of(i, a.shape, a.src.stride));
    const float m = load_f(a.m.data, a.m.type, offset_of(i, a.shape, a.m.stride));
    if (s == m) atomicAdd(count + offset_of(i, a.shape, a.count_stride), 1.0f);
  }
}
__global__ void max_split_kernel(MaxBackwardArgs a, const float* count) {
  MIXP_GRID_STRIDE(i, a.shape.numel()) {
    const float s = load_f(a.src.data, a.src.type, offset_of(i, a.shape, a.src.stride));
    const float m = load_f(a.m.data, a.m.type, offset_of(i, a.shape, a.m.stride));
    const float g = load_f(a.g.data, a.g.type, offset_of(i, a.shape, a.g.stride));
    store_rne(a.dsrc.data, a.dsrc.type, offset_of(i, a.shape, a.dsrc.stride),
              max_split(s, m, g, count[offset_of(i, a.shape, a.count_stride)]));
  }
}

}  // namespace

void launch_max_pool(void* dst, const void* src, Elem t, const PoolShape& p, cudaStream_t stream) {
  const int64_t n = p.N * p.C * p.OH * p.OW;
  if (n) max_pool_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(dst, src, t, p);
}
void launch_max_pool_backward(void* dsrc, const void* ddst, const void* src, Elem t,
                              const PoolShape& p, cudaStream_t stream) {
  const int64_t n = p.N * p.C * p.H * p.W;
  if (n)
    max_pool_backward_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(dsrc, ddst, src, t,
                                                                               p);
}
void launch_avg_pool(void* dst, const void* src, Elem t, const PoolShape& p, cudaStream_t stream) {
  const int64_t n = p.N * p.C * p.OH * p.OW;
  if (n) avg_pool_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(dst, src, t, p);
}
void launch_avg_pool_backward(void* dsrc, const void* ddst, Elem t, const PoolShape& p,
                              cudaStream_t stream) {
  const int64_t n = p.N * p.C * p.H * p.W;
  if (n)
    avg_pool_backward_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(dsrc, ddst, t, p);
}
void launch_im2col(void* col, Elem ct, const void* src, Elem st, const ConvShape& g,
                   cudaStream_t stream) {
  const int64_t n = g.N * g.C * g.KH * g.KW * g.OH * g.OW;
  if (n) im2col_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(col, ct, src, st, g);
}
void launch_col2im(void* dsrc, Elem t, const float* dcol, const ConvShape& g, cudaStream_t stream) {
  const int64_t n = g.N * g.C * g.H * g.W;
  if (n) col2im_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(dsrc, t, dcol, g);
}
void launch_conv_bias(void* dst, Elem t, const float* y32, const void* bias, Elem bt, int64_t N,
                      int64_t O, int64_t S, cudaStream_t stream) {
  const int64_t n = N * O * S;
  if (n)
    conv_bias_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(dst, t, y32, bias, bt, N, O,
                                                                       S);
}
void launch_batch_norm(const BatchNormArgs& a, cudaStream_t stream) {
  if (a.C) batch_norm_kernel<<<static_cast<unsigned>(a.C), kThreads, 0, stream>>>(a);
}
void launch_batch_norm_backward(const BatchNormArgs& a, cudaStream_t stream) {
  if (a.C) batch_norm_backward_kernel<<<static_cast<unsigned>(a.C), kThreads, 0, stream>>>(a);
}
void launch_reduce_max_backward(const MaxBackwardArgs& a, cudaStream_t stream) {
  float* count = nullptr;
  const size_t bytes = static_cast<size_t>(a.groups > 0 ? a.groups : 1) * sizeof(float);
  if (cudaMallocAsync(reinterpret_cast<void**>(&count), bytes, stream) != cudaSuccess) return;
  if (cudaMemsetAsync(count, 0, bytes, stream) != cudaSuccess) return;
  const int64_t n = a.shape.numel();
  if (n) {
    max_count_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(a, count);
    max_split_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(a, count);
  }
  cudaFreeAsync(count, stream);
}

}  // namespace mixp::cuda
