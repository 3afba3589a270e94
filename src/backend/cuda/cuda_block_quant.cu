// The block-scaled quantizer kernels (nvfp4, mxfp4, fp8-block; docs/cuda.md "Block-scaled
// recipes"). Every code, scale and value comes from src/format/block_quant_math.h, the
// functions the CPU path runs (src/format/block_scaled_kernels.inc, block_scaled.cpp), with the
// same inputs: a tile's amax is a max (order-free, taken over |x|'s bits as the CPU does), so
// the GPU's codes and scales equal the CPU's bit for bit (tests/cuda/test_cuda_block_device.cpp
// compares them where a GPU is lent; tests/cuda/test_cuda_block_math.cpp runs this file's
// per-tile structure on the host against the CPU path everywhere).
#include "backend/cuda/cuda_block_quant_kernels.h"
#include "backend/cuda/cuda_elem.cuh"
#include "format/block_quant_math.h"
#include "mixp/format/rounding.h"

namespace mixp::cuda {
namespace {

using namespace block_math;

// One block of T threads per tile (blockIdx.x = tile index, tiles row-major): the tile's amax
// (each thread a strided share, then a tree of maxima), its scale by thread 0, then the codes.
template <int T>
__global__ void block_quantize_kernel(BlockQuantArgs a) {
  __shared__ uint32_t red[T];
  __shared__ float ts_enc, ts_s;  // the tile's scale (a plain pair: no initializer in shared)
  const int64_t gc = (a.cols + a.tw - 1) / a.tw;
  const int64_t tile = blockIdx.x;
  const int64_t r0 = (tile / gc) * a.th, c0 = (tile % gc) * a.tw;
  const int64_t n = static_cast<int64_t>(a.th) * a.tw;
  uint32_t m = 0;
  for (int64_t e = threadIdx.x; e < n; e += T) {
    const int64_t r = r0 + e / a.tw, c = c0 + e % a.tw;
    if (r < a.rows && c < a.cols) {
      const uint32_t k = abs_key(a.x[r * a.cols + c]);
      m = k > m ? k : m;
    }
  }
  red[threadIdx.x] = m;
  __syncthreads();
  for (int s = T / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s && red[threadIdx.x + s] > red[threadIdx.x])
      red[threadIdx.x] = red[threadIdx.x + s];
    __syncthreads();
  }
  TensorScales gs;
  if (a.kind == kNvfp4) gs = nvfp4_tensor_scales(*a.amax);
  if (threadIdx.x == 0) {
    const TileScale t = tile_scale(a.kind, a.pow2, bitsf(red[0]), gs.gdec, gs.gmult);
    ts_enc = t.enc;
    ts_s = t.s;
    if (a.scales) a.scales[tile] = t.s;
    if (a.scale_codes) a.scale_codes[tile] = t.code;
  }
  __syncthreads();
  TileScale ts;
  ts.enc = ts_enc;
  ts.s = ts_s;
  const bool fp8 = a.kind == kFp8Block;
  for (int64_t e = threadIdx.x; e < n; e += T) {
    const int64_t r = r0 + e / a.tw, c = c0 + e % a.tw;
    if (r >= a.rows || c >= a.cols) continue;
    const int64_t i = r * a.cols + c;
    const float v = a.x[i] * ts.enc;
    uint32_t code;
    float deq, fac;
    if (fp8) {
      code = e4m3_code(v);
      deq = e4m3_value(code) * ts.s;
      fac = e4m3_value(code) * 1.0f;
    } else {
      code = a.sr ? e2m1_code_sr(v, sr_bits(a.seed, static_cast<uint64_t>(i))) : e2m1_code_rne(v);
      deq = e2m1_deq(code, ts.s, gs.g);
      fac = e2m1_deq(code, ts.s, 1.0f);
    }
    if (a.codes) a.codes[i] = static_cast<uint8_t>(code);
    if (a.deq) a.deq[i] = deq;
    if (a.factors) a.factors[i] = static_cast<uint16_t>(fbits(fac) >> 16);
  }
}

__global__ void rht16_kernel(float* x, int64_t ng) {
  MIXP_GRID_STRIDE(g, ng) {
    float v[16], o[16];
    for (int i = 0; i < 16; ++i) v[i] = x[g * 16 + i];
    for (int j = 0; j < 16; ++j) o[j] = rht16_output(v, j);
    for (int j = 0; j < 16; ++j) x[g * 16 + j] = o[j];
  }
}

__global__ void accumulate_kernel(float* y, const float* p, int64_t rows, int64_t cols,
                                  const float* sa, const float* sb, bool first) {
  MIXP_GRID_STRIDE(i, rows * cols) {
    const int64_t r = i / cols, c = i - r * cols;
    const float prev = first ? 0.0f : y[i];
    y[i] = prev + p[i] * (sa[r] * sb[c]);
  }
}

__global__ void expand_kernel(float* dst, const float* s, int64_t rows, int64_t gc, int th) {
  MIXP_GRID_STRIDE(i, rows * gc) {
    const int64_t c = i / rows, r = i - c * rows;
    dst[i] = s[(r / th) * gc + c];
  }
}

__global__ void columns_kernel(float* dst, const float* x, int64_t rows, int64_t cols, int64_t rp) {
  MIXP_GRID_STRIDE(i, cols * rp) {
    const int64_t c = i / rp, r = i - c * rp;
    dst[i] = r < rows ? x[r * cols + c] : 0.0f;
  }
}

__global__ void scale_by_product_kernel(float* y, int64_t n, const float* amax_a,
                                        const float* amax_b) {
  const float f = nvfp4_tensor_scales(*amax_a).g * nvfp4_tensor_scales(*amax_b).g;
  MIXP_GRID_STRIDE(i, n) { y[i] *= f; }
}

__global__ void pack_vec_kernel(uint8_t* dst, const uint8_t* sc, int64_t rows, int64_t gc, int th) {
  MIXP_GRID_STRIDE(i, rows * gc) {
    const int64_t r = i / gc, c = i - r * gc;
    dst[vec_scale_offset(r, c, gc)] = sc[(r / th) * gc + c];
  }
}

__global__ void pack_vec128_kernel(float* dst, const float* s, int64_t rows, int64_t gc) {
  MIXP_GRID_STRIDE(i, rows * gc) {
    const int64_t r = i / gc, c = i - r * gc;
    dst[vec128_scale_offset(r, c, rows)] = s[i];
  }
}

__global__ void pack_blk128_kernel(float* dst, const float* s, int64_t gr, int64_t gc) {
  MIXP_GRID_STRIDE(i, gr * gc) {
    const int64_t r = i / gc, c = i - r * gc;
    dst[blk128_scale_offset(r, c, gc)] = s[i];
  }
}

__global__ void pack_fp4_kernel(uint8_t* dst, const uint8_t* codes, int64_t half) {
  MIXP_GRID_STRIDE(i, half) {
    dst[i] = static_cast<uint8_t>((codes[2 * i] & 15u) | ((codes[2 * i + 1] & 15u) << 4));
  }
}

constexpr int kThreads = 256;

}  // namespace

void launch_block_quantize(const BlockQuantArgs& a, cudaStream_t stream) {
  const int64_t tiles = ((a.rows + a.th - 1) / a.th) * ((a.cols + a.tw - 1) / a.tw);
  if (tiles == 0) return;
  if (static_cast<int64_t>(a.th) * a.tw >= 128)
    block_quantize_kernel<128><<<static_cast<unsigned>(tiles), 128, 0, stream>>>(a);
  else
    block_quantize_kernel<32><<<static_cast<unsigned>(tiles), 32, 0, stream>>>(a);
}

void launch_rht16(float* x, int64_t ng, cudaStream_t stream) {
  if (ng > 0) rht16_kernel<<<blocks_for(ng, kThreads), kThreads, 0, stream>>>(x, ng);
}

void launch_block_accumulate(float* y, const float* p, int64_t rows, int64_t cols, const float* sa,
                             const float* sb, bool first, cudaStream_t stream) {
  if (rows * cols > 0)
    accumulate_kernel<<<blocks_for(rows * cols, kThreads), kThreads, 0, stream>>>(y, p, rows, cols,
                                                                                  sa, sb, first);
}

void launch_expand_tile_scales(float* dst, const float* scales, int64_t rows, int64_t gc, int th,
                               cudaStream_t stream) {
  if (rows * gc > 0)
    expand_kernel<<<blocks_for(rows * gc, kThreads), kThreads, 0, stream>>>(dst, scales, rows, gc, th);
}

void launch_columns(float* dst, const float* x, int64_t rows, int64_t cols, int64_t rp,
                    cudaStream_t stream) {
  if (cols * rp > 0)
    columns_kernel<<<blocks_for(cols * rp, kThreads), kThreads, 0, stream>>>(dst, x, rows, cols, rp);
}

void launch_scale_by_product(float* y, int64_t n, const float* amax_a, const float* amax_b,
                             cudaStream_t stream) {
  if (n > 0)
    scale_by_product_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(y, n, amax_a, amax_b);
}

void launch_pack_vec_scales(uint8_t* dst, const uint8_t* scale_codes, int64_t rows, int64_t gc,
                            int th, cudaStream_t stream) {
  if (cudaMemsetAsync(dst, 0, static_cast<size_t>(vec_scale_bytes(rows, gc)), stream) != cudaSuccess)
    return;
  if (rows * gc > 0)
    pack_vec_kernel<<<blocks_for(rows * gc, kThreads), kThreads, 0, stream>>>(dst, scale_codes,
                                                                              rows, gc, th);
}

void launch_pack_vec128_scales(float* dst, const float* scales, int64_t rows, int64_t gc,
                               cudaStream_t stream) {
  if (cudaMemsetAsync(dst, 0, static_cast<size_t>(vec128_scale_count(rows, gc)) * sizeof(float),
                      stream) != cudaSuccess)
    return;
  if (rows * gc > 0)
    pack_vec128_kernel<<<blocks_for(rows * gc, kThreads), kThreads, 0, stream>>>(dst, scales, rows,
                                                                                 gc);
}

void launch_pack_blk128_scales(float* dst, const float* scales, int64_t gr, int64_t gc,
                               cudaStream_t stream) {
  if (cudaMemsetAsync(dst, 0, static_cast<size_t>(gr * round_up(gc, 4)) * sizeof(float), stream) !=
      cudaSuccess)
    return;
  if (gr * gc > 0)
    pack_blk128_kernel<<<blocks_for(gr * gc, kThreads), kThreads, 0, stream>>>(dst, scales, gr, gc);
}

void launch_pack_fp4(uint8_t* dst, const uint8_t* codes, int64_t n, cudaStream_t stream) {
  if (n >= 2)
    pack_fp4_kernel<<<blocks_for(n / 2, kThreads), kThreads, 0, stream>>>(dst, codes, n / 2);
}

}  // namespace mixp::cuda
