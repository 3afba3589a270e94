// Scaled dot-product attention on cuda, the correct fallback (docs/cuda.md): one thread per query
// row running math/attention_math.h (online softmax forward; backward with atomics into dk/dv,
// kept in fp32 scratch and converted afterwards when they are 16-bit). cuDNN's fused attention
// would replace it where available.
#include "backend/cuda/cuda_elem.cuh"
#include "backend/cuda/math/attention_math.h"

namespace mixp::cuda {
namespace {

struct ElemLoad {
  Elem t;
  __device__ float operator()(const void* p, int64_t i) const { return load_f(p, t, i); }
};
struct ElemStore {
  Elem t;
  __device__ void operator()(void* p, int64_t i, float v) const { store_rne(p, t, i, v); }
};
struct F32Store {
  __device__ void operator()(float* p, int64_t i, float v) const { p[i] = v; }
};
struct AtomicAdd {
  __device__ void operator()(float* p, int64_t i, float v) const { atomicAdd(p + i, v); }
};

__global__ void attention_fwd_kernel(const AttnArgs a) {
  const int64_t rows = a.BH * a.Tq;
  const cuda_math::AttnShape s{a.Tq, a.Tk, a.D, a.causal, a.scale};
  const ElemLoad ld{a.type};
  const ElemStore st{a.type};
  for (int64_t r = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; r < rows;
       r += int64_t{gridDim.x} * blockDim.x) {
    const int64_t bh = r / a.Tq, i = r - bh * a.Tq;
    const size_t es = a.elem_bytes;
    const char* q = static_cast<const char*>(a.q) + (r * a.D) * es;
    const char* K = static_cast<const char*>(a.k) + (bh * a.Tk * a.D) * es;
    const char* V = static_cast<const char*>(a.v) + (bh * a.Tk * a.D) * es;
    char* out = static_cast<char*>(a.out) + (r * a.D) * es;
    a.lse[r] = cuda_math::attention_row_forward(s, i, q, K, V, out, ld, st);
  }
}

__global__ void attention_bwd_kernel(const AttnArgs a) {
  const int64_t rows = a.BH * a.Tq;
  const cuda_math::AttnShape s{a.Tq, a.Tk, a.D, a.causal, a.scale};
  const ElemLoad ld{a.type};
  for (int64_t r = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; r < rows;
       r += int64_t{gridDim.x} * blockDim.x) {
    const int64_t bh = r / a.Tq, i = r - bh * a.Tq;
    const size_t es = a.elem_bytes;
    const char* q = static_cast<const char*>(a.q) + (r * a.D) * es;
    const char* K = static_cast<const char*>(a.k) + (bh * a.Tk * a.D) * es;
    const char* V = static_cast<const char*>(a.v) + (bh * a.Tk * a.D) * es;
    const char* dout = static_cast<const char*>(a.dout) + (r * a.D) * es;
    const char* out = static_cast<const char*>(a.out) + (r * a.D) * es;
    cuda_math::attention_row_backward(s, i, q, K, V, dout, out, a.lse[r], a.dq32 + r * a.D,
                                      a.dk32 + bh * a.Tk * a.D, a.dv32 + bh * a.Tk * a.D, ld,
                                      AtomicAdd{}, F32Store{});
  }
}

}  // namespace

void launch_attention_forward(const AttnArgs& a, cudaStream_t stream) {
  const int64_t rows = a.BH * a.Tq;
  constexpr int kThreads = 128;
  if (rows) attention_fwd_kernel<<<blocks_for(rows, kThreads), kThreads, 0, stream>>>(a);
}
void launch_attention_backward(const AttnArgs& a, cudaStream_t stream) {
  const int64_t rows = a.BH * a.Tq;
  constexpr int kThreads = 128;
  if (rows) attention_bwd_kernel<<<blocks_for(rows, kThreads), kThreads, 0, stream>>>(a);
}

}  // namespace mixp::cuda
