// Reductions and row kernels: reduce (sum/mean/max over any dims), softmax, cross-entropy,
// embedding, argmax (LayerNorm: cuda_norm.cu). One block per output row, a shared-memory tree over
// the block's threads (cuda_block_reduce.cuh); fp32 accumulation (backend/backend.h: reductions
// in fp32 accumulate in fp32).
#include <cfloat>

#include "backend/cuda/cuda_block_reduce.cuh"

namespace mixp::cuda {
namespace {

__global__ void reduce_kernel(const ReduceArgs a, int64_t outputs) {
  // The reduced dims (src size > 1, dst size 1) and the kept ones, as index spaces.
  Shape8 red;
  int64_t red_stride[kMaxRank];
  int64_t keep_stride[kMaxRank];
  for (int d = 0; d < a.src_shape.rank; ++d) {
    keep_stride[d] = a.dst_shape.size[d] == 1 ? 0 : a.src.stride[d];
    if (a.dst_shape.size[d] == 1 && a.src_shape.size[d] > 1) {
      red.size[red.rank] = a.src_shape.size[d];
      red_stride[red.rank++] = a.src.stride[d];
    }
  }
  const int64_t count = red.numel();
  for (int64_t o = blockIdx.x; o < outputs; o += gridDim.x) {
    const int64_t base = offset_of(o, a.dst_shape, keep_stride);
    float acc = a.op == 2 ? -INFINITY : 0.0f;
    for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
      const float v = load_f(a.src.data, a.src.type, base + offset_of(j, red, red_stride));
      if (a.op == 2) {
        acc = v > acc || v != v ? v : acc;
      } else {
        acc += v;
      }
    }
    float r = a.op == 2 ? block_reduce<true>(acc) : block_reduce<false>(acc);
    if (a.op == 1) r = r / static_cast<float>(count);
    if (threadIdx.x == 0) store_rne(a.dst, a.dst_type, o, r);
  }
}

// A row's max m and sum of exp(x - m) over its first n elements, reduced over the block (every
// thread gets both): softmax and cross-entropy share it.
struct RowMaxSumExp {
  float m, s;
};
__device__ RowMaxSumExp row_max_sum_exp(const float* x, int64_t n) {
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, x[j]);
  m = block_reduce<true>(m);
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += expf(x[j] - m);
  return {m, block_reduce<false>(s)};
}

__global__ void softmax_kernel(float* dst, const float* src, int64_t rows, int64_t n, bool log) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* x = src + r * n;
    float* y = dst + r * n;
    const auto [m, s] = row_max_sum_exp(x, n);
    const float ls = logf(s);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      y[j] = log ? x[j] - m - ls : expf(x[j] - m) / s;
  }
}

__global__ void softmax_backward_kernel(float* dsrc, const float* ddst, const float* dst,
                                        int64_t rows, int64_t n, bool log) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* g = ddst + r * n;
    const float* y = dst + r * n;
    float* dx = dsrc + r * n;
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += log ? g[j] : g[j] * y[j];
    s = block_reduce<false>(s);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      dx[j] = log ? g[j] - expf(y[j]) * s : y[j] * (g[j] - s);
  }
}

__device__ inline int64_t index_at(const void* idx, bool idx64, int64_t i) {
  return idx64 ? static_cast<const int64_t*>(idx)[i] : static_cast<const int32_t*>(idx)[i];
}

// Per row: lse and lse - x[t] into row_loss; the mean is a second, one-block pass (fixed order).
// Rows are `ld` apart, of which the first n are classes (the fused classifier's padded logits).
__global__ void cross_entropy_rows(float* row_loss, float* lse, const float* logits,
                                   const void* targets, bool idx64, int64_t rows, int64_t n,
                                   int64_t ld) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* x = logits + r * ld;
    const auto [m, s] = row_max_sum_exp(x, n);
    if (threadIdx.x == 0) {
      const float l = m + logf(s);
      lse[r] = l;
      const int64_t t = index_at(targets, idx64, r);
      row_loss[r] = t >= 0 && t < n ? l - x[t] : NAN;
    }
  }
}
__global__ void mean_kernel(float* out, const float* v, int64_t n) {
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += v[j];
  s = block_reduce<false>(s);
  if (threadIdx.x == 0) out[0] = s / static_cast<float>(n);
}

// Rows `ld` apart; columns n..ld-1 (padding) get exactly 0. dlogits may be logits (in place: each
// element is read and written by the same thread).
__global__ void cross_entropy_backward_kernel(float* dlogits, const float* dloss,
                                              const float* logits, const void* targets, bool idx64,
                                              const float* lse, int64_t rows, int64_t n,
                                              int64_t ld) {
  const int64_t total = rows * ld;
  const float scale = dloss[0] / static_cast<float>(rows);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / ld, j = i - r * ld;
    if (j >= n) {
      dlogits[i] = 0.0f;
      continue;
    }
    const float p = expf(logits[i] - lse[r]);
    dlogits[i] = scale * (p - (index_at(targets, idx64, r) == j ? 1.0f : 0.0f));
  }
}

__global__ void embedding_kernel(float* dst, const float* w, const void* idx, bool idx64,
                                 int64_t count, int64_t dim, int64_t vocab) {
  const int64_t total = count * dim;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / dim;
    const int64_t t = index_at(idx, idx64, r);
    dst[i] = t >= 0 && t < vocab ? w[t * dim + (i - r * dim)] : NAN;
  }
}
__global__ void embedding_backward_kernel(float* dw, const float* ddst, const void* idx,
                                          bool idx64, int64_t count, int64_t dim, int64_t vocab) {
  const int64_t total = count * dim;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / dim;
    const int64_t t = index_at(idx, idx64, r);
    if (t >= 0 && t < vocab) atomicAdd(dw + t * dim + (i - r * dim), ddst[i]);
  }
}

__device__ inline double load_any(const void* p, Elem t, int64_t i) {
  switch (t) {
    case Elem::raw8: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case Elem::raw4: return static_cast<double>(static_cast<const int32_t*>(p)[i]);
    default: return static_cast<double>(load_f(p, t, i));
  }
}
__global__ void argmax_kernel(int64_t* dst, const void* src, Elem t, int64_t outer, int64_t n,
                              int64_t inner) {
  const int64_t total = outer * inner;
  for (int64_t o = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; o < total;
       o += int64_t{gridDim.x} * blockDim.x) {
    const int64_t a = o / inner, b = o - a * inner;
    int64_t best = 0;
    double bv = load_any(src, t, a * n * inner + b);
    for (int64_t j = 1; j < n && bv == bv; ++j) {
      const double v = load_any(src, t, (a * n + j) * inner + b);
      if (v > bv || v != v) {
        bv = v;
        best = j;
      }
    }
    dst[o] = best;
  }
}

}  // namespace

void launch_reduce(const ReduceArgs& a, cudaStream_t stream) {
  const int64_t outputs = a.dst_shape.numel();
  if (outputs == 0) return;
  reduce_kernel<<<blocks_for(outputs, 1), kThreads, 0, stream>>>(a, outputs);
}
void launch_softmax(float* dst, const float* src, int64_t rows, int64_t n, bool log,
                    cudaStream_t stream) {
  if (rows) softmax_kernel<<<blocks_for(rows, 1), kThreads, 0, stream>>>(dst, src, rows, n, log);
}
void launch_softmax_backward(float* dsrc, const float* ddst, const float* dst, int64_t rows,
                             int64_t n, bool log, cudaStream_t stream) {
  if (rows)
    softmax_backward_kernel<<<blocks_for(rows, 1), kThreads, 0, stream>>>(dsrc, ddst, dst, rows, n,
                                                                          log);
}
void launch_cross_entropy(float* loss, float* lse, const float* logits, const void* targets,
                          bool idx64, int64_t rows, int64_t n, int64_t ld, cudaStream_t stream) {
  if (!rows) return;
  // The per-row losses, summed in a second pass in row order (a deterministic mean).
  float* row_loss = nullptr;
  // On failure the caller's launch check reports the error (cudaGetLastError).
  if (cudaMallocAsync(reinterpret_cast<void**>(&row_loss),
                      static_cast<size_t>(rows) * sizeof(float), stream) != cudaSuccess)
    return;
  cross_entropy_rows<<<blocks_for(rows, 1), kThreads, 0, stream>>>(row_loss, lse, logits, targets,
                                                                   idx64, rows, n, ld);
  mean_kernel<<<1, kThreads, 0, stream>>>(loss, row_loss, rows);
  cudaFreeAsync(row_loss, stream);
}
void launch_cross_entropy_backward(float* dlogits, const float* dloss, const float* logits,
                                   const void* targets, bool idx64, const float* lse, int64_t rows,
                                   int64_t n, int64_t ld, cudaStream_t stream) {
  if (rows * ld != 0)
    cross_entropy_backward_kernel<<<blocks_for(rows * ld, kThreads), kThreads, 0, stream>>>(
        dlogits, dloss, logits, targets, idx64, lse, rows, n, ld);
}
void launch_embedding(float* dst, const float* weight, const void* idx, bool idx64, int64_t count,
                      int64_t dim, int64_t vocab, cudaStream_t stream) {
  if (count * dim != 0)
    embedding_kernel<<<blocks_for(count * dim, kThreads), kThreads, 0, stream>>>(
        dst, weight, idx, idx64, count, dim, vocab);
}
void launch_embedding_backward(float* dweight, const float* ddst, const void* idx, bool idx64,
                               int64_t count, int64_t dim, int64_t vocab, cudaStream_t stream) {
  if (count * dim != 0)
    embedding_backward_kernel<<<blocks_for(count * dim, kThreads), kThreads, 0, stream>>>(
        dweight, ddst, idx, idx64, count, dim, vocab);
}
void launch_argmax(int64_t* dst, const void* src, Elem type, int64_t outer, int64_t n,
                   int64_t inner, cudaStream_t stream) {
  if (outer * inner != 0)
    argmax_kernel<<<blocks_for(outer * inner, kThreads), kThreads, 0, stream>>>(dst, src, type,
                                                                                outer, n, inner);
}

}  // namespace mixp::cuda
