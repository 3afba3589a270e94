// The scaling, quantization and statistics kernels (the FP8/MX recipes, QAT and its low-bit
// codes, the NaN/Inf detector, the binary cross entropy). Element rules: math/quant_math.h, tested
// against the ref backend on the CPU. Reductions are deterministic: amax by an unsigned atomicMax
// over |x|'s bits (a max does not depend on order), minmax by contiguous runs merged in element
// order, and the double sums that the ref takes in element order in one thread, in that order.
#include "backend/cuda/cuda_elem.cuh"
#include "backend/cuda/cuda_quant_kernels.h"
#include "backend/cuda/math/quant_math.h"

namespace mixp::cuda {
namespace {

using namespace cuda_math;
constexpr int kThreads = 256;

__device__ void amax_into(unsigned* dst, unsigned key) {
  // Reduce in the warp first, then one atomic per warp.
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned other = __shfl_down_sync(0xFFFFFFFFU, key, o);
    key = other > key ? other : key;
  }
  if ((threadIdx.x & 31) == 0 && key) atomicMax(dst, key);
}

__global__ void amax_kernel(unsigned* dst, const float* src, int64_t n) {
  unsigned key = 0;
  MIXP_GRID_STRIDE(i, n) {
    const unsigned k = amax_key(src[i]);
    key = k > key ? k : key;
  }
  amax_into(dst, key);
}

// Block (c, p) reduces the p-th run of channel c's elements (j = o * inner + k in element order).
__global__ void minmax_partial(MinMaxAcc* part, const float* src, int64_t outer, int64_t channels,
                               int64_t inner, int64_t per_block) {
  __shared__ MinMaxAcc buf[kThreads];
  const int64_t c = blockIdx.x, p = blockIdx.y;
  const int64_t count = outer * inner;
  const int64_t lo = p * per_block, hi = lo + per_block < count ? lo + per_block : count;
  const int64_t per_thread = (per_block + kThreads - 1) / kThreads;
  const int64_t tlo = lo + threadIdx.x * per_thread;
  const int64_t thi = tlo + per_thread < hi ? tlo + per_thread : hi;
  MinMaxAcc acc = minmax_init();
  for (int64_t j = tlo; j < thi; ++j) {
    const int64_t o = j / inner, k = j - o * inner;
    minmax_add(acc, src[(o * channels + c) * inner + k]);
  }
  buf[threadIdx.x] = acc;
  __syncthreads();
  for (int s = 1; s < kThreads; s <<= 1) {  // adjacent runs: element order is kept
    if (threadIdx.x % (2 * s) == 0)
      buf[threadIdx.x] = minmax_merge(buf[threadIdx.x], buf[threadIdx.x + s]);
    __syncthreads();
  }
  if (threadIdx.x == 0) part[c * gridDim.y + p] = buf[0];
}
__global__ void minmax_final(float* mn, float* mx, const MinMaxAcc* part, int64_t channels,
                             int64_t parts) {
  MIXP_GRID_STRIDE(c, channels) {
    MinMaxAcc acc = minmax_init();
    for (int64_t p = 0; p < parts; ++p) acc = minmax_merge(acc, part[c * parts + p]);
    mn[c] = minmax_min(acc);
    mx[c] = minmax_max(acc);
  }
}

// T: uint16_t (bf16 values) or uint8_t (the fp8 codes).
template <typename T>
__global__ void fp8_tensor_kernel(T* dst, unsigned* amax, const float* src, int64_t n,
                                  float scale, bool e5m2) {
  unsigned key = 0;
  MIXP_GRID_STRIDE(i, n) {
    const float x = src[i];
    if constexpr (sizeof(T) == 1)
      dst[i] = fp8_tensor_code(x, scale, e5m2);
    else
      dst[i] = fp8_tensor_element(x, scale, e5m2);
    const unsigned k = amax_key(x);
    key = k > key ? k : key;
  }
  if (amax) amax_into(amax, key);
}

// One thread per MX block.
__global__ void mx_kernel(uint16_t* dst, const float* src, int64_t rows, int64_t row_len, int block,
                          bool e5m2) {
  const int64_t per_row = (row_len + block - 1) / block;
  MIXP_GRID_STRIDE(b, rows * per_row) {
    const int64_t r = b / per_row, j = b - r * per_row;
    const int64_t begin = r * row_len + j * block;
    const int64_t len = row_len - j * block < block ? row_len - j * block : block;
    uint32_t amax = 0;
    for (int64_t k = 0; k < len; ++k) {
      const uint32_t a = mx_abs_bits(src[begin + k]);
      amax = a > amax ? a : amax;
    }
    const int s = mx_block_exponent(amax, e5m2);
    for (int64_t k = 0; k < len; ++k) dst[begin + k] = mx_element(src[begin + k], s, e5m2);
  }
}

__global__ void int_fake_kernel(float* dst, uint8_t* mask, const float* src, int64_t n,
                                const IntQ* params, int64_t channels, int64_t inner) {
  MIXP_GRID_STRIDE(i, n) {
    const int64_t c = inner ? (i / inner) % channels : 0;
    const IntQ p = params[c];
    uint8_t in = 0;
    dst[i] = int_fake_element(src[i], p.scale, p.zero_point, p.qmin, p.qmax, &in);
    if (mask) mask[i] = in;
  }
}

__global__ void mask_grad_kernel(float* d, const float* g, const void* mask, bool u8, int64_t n) {
  MIXP_GRID_STRIDE(i, n) {
    d[i] = u8 ? ste_u8(g[i], static_cast<const uint8_t*>(mask)[i])
              : ste_relu(g[i], static_cast<const float*>(mask)[i]);
  }
}

// weight_int: one block per row; min(.., 0)/max(.., 0) do not depend on the order (NaN is
// skipped, and +0 is never replaced by -0), so the tree gives the ref's values.
__global__ void lowbit_weight_int(LowBitArgs a) {
  __shared__ float smn[kThreads], smx[kThreads];
  __shared__ float inv_s;
  const int64_t o = blockIdx.x;
  const float* r = a.src + o * a.K;
  float mn = 0.0f, mx = 0.0f;
  for (int64_t k = threadIdx.x; k < a.K; k += blockDim.x) {
    mn = r[k] < mn ? r[k] : mn;
    mx = mx < r[k] ? r[k] : mx;
  }
  smn[threadIdx.x] = mn;
  smx[threadIdx.x] = mx;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      const float m2 = smn[threadIdx.x + s], x2 = smx[threadIdx.x + s];
      smn[threadIdx.x] = m2 < smn[threadIdx.x] ? m2 : smn[threadIdx.x];
      smx[threadIdx.x] = smx[threadIdx.x] < x2 ? x2 : smx[threadIdx.x];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const float s = lowbit_row_scale(smn[0], smx[0], a.qmin, a.qmax);
    a.scales[o] = s;
    inv_s = 1.0f / s;
  }
  __syncthreads();
  const float inv = inv_s;
  for (int64_t k = threadIdx.x; k < a.K; k += blockDim.x) {
    uint8_t m = 0;
    a.codes[o * a.K + k] = lowbit_int_code(r[k], inv, a.qmin, a.qmax, &m);
    if (a.mask) a.mask[o * a.K + k] = m;
  }
}

// weight_ternary, one thread: the double sums in element order; delta to *delta_out.
__global__ void ternary_stats(LowBitArgs a, float* delta_out) {
  const int64_t n = a.O * a.K;
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::fabs(static_cast<double>(a.src[i]));
  const float delta = ternary_delta(sum, n);
  double above = 0;
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (ternary_code(a.src[i], delta) != 0.0f) {
      above += std::fabs(static_cast<double>(a.src[i]));
      ++count;
    }
  }
  const float alpha = mean_abs_scale(above, count);
  for (int64_t o = 0; o < a.O; ++o) a.scales[o] = alpha;
  *delta_out = delta;
}
__global__ void ternary_codes(LowBitArgs a, const float* delta) {
  const float d = *delta;
  MIXP_GRID_STRIDE(i, a.O * a.K) {
    a.codes[i] = ternary_code(a.src[i], d);
    if (a.mask) a.mask[i] = 1;
  }
}

// weight_binary: one thread per row sums |w| in order; the codes elementwise.
__global__ void binary_scales(LowBitArgs a) {
  MIXP_GRID_STRIDE(o, a.O) {
    double sum = 0;
    for (int64_t k = 0; k < a.K; ++k) sum += std::fabs(static_cast<double>(a.src[o * a.K + k]));
    const float m = static_cast<float>(sum / static_cast<double>(a.K > 1 ? a.K : 1));
    a.scales[o] = m < kMinScaleF ? kMinScaleF : m;
  }
}
__global__ void sign_codes(LowBitArgs a) {
  MIXP_GRID_STRIDE(i, a.O * a.K) {
    uint8_t m = 0;
    a.codes[i] = lowbit_sign_code(a.src[i], &m);
    if (a.mask) a.mask[i] = m;
  }
}
__global__ void act_int_codes(LowBitArgs a, float inv) {
  MIXP_GRID_STRIDE(i, a.O * a.K) {
    uint8_t m = 0;
    a.codes[i] = lowbit_int_code(a.src[i], inv, a.qmin, a.qmax, &m);
    if (a.mask) a.mask[i] = m;
  }
}

__global__ void lowbit_backward_kernel(float* d, const float* g, const uint8_t* m, const float* inv,
                                       int64_t channels, int64_t inner, int64_t n) {
  MIXP_GRID_STRIDE(i, n) d[i] = lowbit_ste(g[i], m[i], inv[(i / inner) % channels]);
}

__global__ void scale_bias_act_kernel(float* dst, const float* src, const float* bias, int64_t rows,
                                      int64_t n, float alpha, bool relu) {
  MIXP_GRID_STRIDE(i, rows * n) {
    dst[i] = scale_bias_act_element(src[i], alpha, bias ? bias + i % n : nullptr, relu);
  }
}

__global__ void fp8_scale_update_kernel(float* h, int64_t n, float* scale, float* scale_inv,
                                        bool roll, float amax, bool most_recent, float fp8_max,
                                        int margin) {
  fp8_scale_update_state(h, n, scale, scale_inv, roll, amax, most_recent, fp8_max, margin);
}

__global__ void count_nonfinite_kernel(unsigned long long* dst, const void* src, Shape8 shape,
                                       View v, int bytes, uint64_t exp_mask, uint64_t man_mask) {
  unsigned long long nan = 0, inf = 0;
  MIXP_GRID_STRIDE(i, shape.numel()) {
    const int64_t off = offset_of(i, shape, v.stride);
    uint64_t bits = 0;
    if (bytes == 2)
      bits = static_cast<const uint16_t*>(src)[off];
    else if (bytes == 4)
      bits = static_cast<const uint32_t*>(src)[off];
    else
      bits = static_cast<const uint64_t*>(src)[off];
    const int c = nonfinite_class(bits, exp_mask, man_mask);
    nan += c == 0;
    inf += c == 1;
  }
  if (nan) atomicAdd(dst, nan);
  if (inf) atomicAdd(dst + 1, inf);
}

template <class T>
__global__ void bce_kernel(T* loss, const T* x, const T* t, int64_t n, bool logits) {
  double acc = 0.0;
  for (int64_t i = 0; i < n; ++i) acc = bce_accumulate(acc, x[i], t[i], logits);
  loss[0] = static_cast<T>(n ? acc / static_cast<double>(n) : NAN);
}
template <class T>
__global__ void bce_backward_kernel(T* dx, T* dt, const T* dloss, const T* x, const T* t, int64_t n,
                                    bool logits) {
  const double scale = static_cast<double>(dloss[0]) / static_cast<double>(n);
  MIXP_GRID_STRIDE(i, n) {
    const double v = x[i], y = t[i];
    if (dx) dx[i] = static_cast<T>(scale * bce_dx(v, y, logits));
    if (dt) dt[i] = static_cast<T>(scale * bce_dtarget(v, logits));
  }
}

__global__ void scale_by_two_kernel(void* dst, Elem t, const float* src, int64_t n, const float* sa,
                                    const float* sb) {
  const float s = *sa * *sb;
  MIXP_GRID_STRIDE(i, n) store_rne(dst, t, i, src[i] * s);
}

}  // namespace

void launch_scale_by_two(void* dst, Elem dst_type, const float* src, int64_t n, const float* sa,
                         const float* sb, cudaStream_t stream) {
  if (n)
    scale_by_two_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(dst, dst_type, src, n, sa,
                                                                          sb);
}

void launch_amax(float* dst, const float* src, int64_t n, cudaStream_t stream) {
  if (cudaMemsetAsync(dst, 0, sizeof(float), stream) != cudaSuccess) return;
  if (n)
    amax_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(reinterpret_cast<unsigned*>(dst),
                                                                  src, n);
}

void launch_minmax(float* mn, float* mx, const float* src, int64_t outer, int64_t channels,
                   int64_t inner, cudaStream_t stream) {
  if (channels <= 0) return;
  const int64_t count = outer * inner;
  // Runs of at least 4096 elements, at most 256 per channel.
  int64_t parts = (count + 4095) / 4096;
  parts = parts < 1 ? 1 : (parts > 256 ? 256 : parts);
  const int64_t per_block = (count + parts - 1) / parts;
  MinMaxAcc* part = nullptr;
  if (cudaMallocAsync(reinterpret_cast<void**>(&part),
                      static_cast<size_t>(parts * channels) * sizeof(MinMaxAcc),
                      stream) != cudaSuccess)
    return;
  minmax_partial<<<dim3(static_cast<unsigned>(channels), static_cast<unsigned>(parts)), kThreads, 0,
                   stream>>>(part, src, outer, channels, inner, per_block > 0 ? per_block : 1);
  minmax_final<<<blocks_for(channels, kThreads), kThreads, 0, stream>>>(mn, mx, part, channels,
                                                                        parts);
  cudaFreeAsync(part, stream);
}

void launch_quantize_fp8_tensor(void* dst, bool codes, float* amax, const float* src, int64_t n,
                                float scale, bool e5m2, cudaStream_t stream) {
  if (amax && cudaMemsetAsync(amax, 0, sizeof(float), stream) != cudaSuccess) return;
  if (!n) return;
  if (codes)
    fp8_tensor_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<uint8_t*>(dst), reinterpret_cast<unsigned*>(amax), src, n, scale, e5m2);
  else
    fp8_tensor_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<uint16_t*>(dst), reinterpret_cast<unsigned*>(amax), src, n, scale, e5m2);
}

void launch_quantize_mx(uint16_t* dst, const float* src, int64_t rows, int64_t row_len, int block,
                        bool e5m2, cudaStream_t stream) {
  const int64_t blocks = rows * ((row_len + block - 1) / block);
  if (blocks)
    mx_kernel<<<blocks_for(blocks, kThreads), kThreads, 0, stream>>>(dst, src, rows, row_len, block,
                                                                     e5m2);
}

void launch_quantize_int(float* dst, uint8_t* mask, const float* src, int64_t n,
                         const IntQ* host_params, int64_t channels, int64_t inner,
                         cudaStream_t stream) {
  if (n == 0) return;
  IntQ* p = nullptr;
  const size_t bytes = static_cast<size_t>(channels) * sizeof(IntQ);
  if (cudaMallocAsync(reinterpret_cast<void**>(&p), bytes, stream) != cudaSuccess) return;
  // From pageable memory: returns once the host buffer has been staged, so it may go away.
  if (cudaMemcpyAsync(p, host_params, bytes, cudaMemcpyHostToDevice, stream) != cudaSuccess) return;
  int_fake_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(dst, mask, src, n, p, channels,
                                                                    inner);
  cudaFreeAsync(p, stream);
}

void launch_mask_grad(float* dsrc, const float* ddst, const void* mask, bool u8, int64_t n,
                      cudaStream_t stream) {
  if (n)
    mask_grad_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(dsrc, ddst, mask, u8, n);
}

void launch_lowbit_codes(const LowBitArgs& a, cudaStream_t stream) {
  const int64_t n = a.O * a.K;
  switch (a.kind) {
    case 0:  // weight_int
      if (a.O) lowbit_weight_int<<<static_cast<unsigned>(a.O), kThreads, 0, stream>>>(a);
      return;
    case 1: {  // weight_ternary
      float* delta = nullptr;
      if (cudaMallocAsync(reinterpret_cast<void**>(&delta), sizeof(float), stream) != cudaSuccess)
        return;
      ternary_stats<<<1, 1, 0, stream>>>(a, delta);
      if (n) ternary_codes<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(a, delta);
      cudaFreeAsync(delta, stream);
      return;
    }
    case 2:  // weight_binary
      if (a.O) binary_scales<<<blocks_for(a.O, 64), 64, 0, stream>>>(a);
      if (n) sign_codes<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(a);
      return;
    case 3:  // act_int
      if (n) act_int_codes<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(a, 1.0f / a.scale);
      return;
    default:  // act_sign
      if (n) sign_codes<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(a);
      return;
  }
}

void launch_lowbit_backward(float* dsrc, const float* ddst, const uint8_t* mask, const float* inv,
                            int64_t channels, int64_t inner, int64_t n, cudaStream_t stream) {
  if (n)
    lowbit_backward_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(dsrc, ddst, mask, inv,
                                                                             channels, inner, n);
}

void launch_scale_bias_act(float* dst, const float* src, const float* bias, int64_t rows, int64_t n,
                           float alpha, bool relu, cudaStream_t stream) {
  if (rows * n > 0)
    scale_bias_act_kernel<<<blocks_for(rows * n, kThreads), kThreads, 0, stream>>>(
        dst, src, bias, rows, n, alpha, relu);
}

void launch_fp8_scale_update(float* history, int64_t n, float* scale, float* scale_inv, bool roll,
                             float amax, bool most_recent, float fp8_max, int margin,
                             cudaStream_t stream) {
  fp8_scale_update_kernel<<<1, 1, 0, stream>>>(history, n, scale, scale_inv, roll, amax,
                                               most_recent, fp8_max, margin);
}

void launch_count_nonfinite(int64_t* dst, const void* src, const Shape8& shape,
                            const int64_t* stride, int bytes, uint64_t exp_mask, uint64_t man_mask,
                            cudaStream_t stream) {
  if (cudaMemsetAsync(dst, 0, 2 * sizeof(int64_t), stream) != cudaSuccess) return;
  View v;
  for (int d = 0; d < shape.rank; ++d) v.stride[d] = stride[d];
  const int64_t n = shape.numel();
  if (n)
    count_nonfinite_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
        reinterpret_cast<unsigned long long*>(dst), src, shape, v, bytes, exp_mask, man_mask);
}

void launch_bce(void* loss, const void* x, const void* t, int64_t n, bool logits, bool f64,
                cudaStream_t stream) {
  if (f64)
    bce_kernel<double><<<1, 1, 0, stream>>>(static_cast<double*>(loss),
                                            static_cast<const double*>(x),
                                            static_cast<const double*>(t), n, logits);
  else
    bce_kernel<float><<<1, 1, 0, stream>>>(static_cast<float*>(loss), static_cast<const float*>(x),
                                           static_cast<const float*>(t), n, logits);
}

void launch_bce_backward(void* dx, void* dtarget, const void* dloss, const void* x, const void* t,
                         int64_t n, bool logits, bool f64, cudaStream_t stream) {
  if (n == 0) return;
  if (f64)
    bce_backward_kernel<double><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<double*>(dx), static_cast<double*>(dtarget), static_cast<const double*>(dloss),
        static_cast<const double*>(x), static_cast<const double*>(t), n, logits);
  else
    bce_backward_kernel<float><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<float*>(dx), static_cast<float*>(dtarget), static_cast<const float*>(dloss),
        static_cast<const float*>(x), static_cast<const float*>(t), n, logits);
}

}  // namespace mixp::cuda
