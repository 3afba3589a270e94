// Internal to the .cu files: loading and storing one element of any Elem type as fp32, through
// the shared encoder (math/float_encode.h), and the strided offset of a row-major index.
#pragma once
#include <cstdint>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/math/float_encode.h"

namespace mixp::cuda {

__device__ inline float load_f(const void* p, Elem t, int64_t i) {
  using namespace cuda_math;
  switch (t) {
    case Elem::f32:
    case Elem::tf32: return static_cast<const float*>(p)[i];
    case Elem::bf16: return bits_f32(uint32_t{static_cast<const uint16_t*>(p)[i]} << 16);
    case Elem::f16: return decode_f32(kFp16(), static_cast<const uint16_t*>(p)[i]);
    case Elem::e4m3: return decode_f32(kE4m3(), static_cast<const uint8_t*>(p)[i]);
    case Elem::e5m2: return decode_f32(kE5m2(), static_cast<const uint8_t*>(p)[i]);
    default: return 0.0f;
  }
}

__device__ inline void store_f(void* p, Elem t, int64_t i, float v, Round r, Overflow ov,
                               uint32_t random_bits) {
  using namespace cuda_math;
  switch (t) {
    case Elem::f32: static_cast<float*>(p)[i] = v; return;
    case Elem::tf32: static_cast<float*>(p)[i] = round_tf32(v, r, ov, random_bits); return;
    case Elem::bf16:
      static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(encode_f32(kBf16(), v, r, ov, random_bits));
      return;
    case Elem::f16:
      static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(encode_f32(kFp16(), v, r, ov, random_bits));
      return;
    case Elem::e4m3:
      static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(encode_f32(kE4m3(), v, r, ov, random_bits));
      return;
    case Elem::e5m2:
      static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(encode_f32(kE5m2(), v, r, ov, random_bits));
      return;
    default: return;
  }
}
// Nearest-even, IEEE overflow: how every kernel result is rounded (backend/backend.h).
__device__ inline void store_rne(void* p, Elem t, int64_t i, float v) {
  store_f(p, t, i, v, Round::nearest_even, Overflow::ieee, 0);
}

__device__ inline int64_t offset_of(int64_t i, const Shape8& sh, const int64_t* stride) {
  int64_t off = 0;
  for (int d = sh.rank - 1; d >= 0; --d) {
    const int64_t q = i / sh.size[d];
    off += (i - q * sh.size[d]) * stride[d];
    i = q;
  }
  return off;
}

// A grid-stride loop over [0, n): each thread takes i, i + the grid's size, ... (launched with
// blocks_for(n, threads) blocks, which caps the grid).
#define MIXP_GRID_STRIDE(i, n)                                              \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); \
       i += int64_t{gridDim.x} * blockDim.x)

inline int blocks_for(int64_t n, int threads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<int>(b < 65535 * 16 ? (b > 0 ? b : 1) : 65535 * 16);
}

}  // namespace mixp::cuda
