// Internal: the launchers of the scaling, quantization and statistics kernels (cuda_quant.cu),
// over raw device pointers, as cuda_kernels.h (kept apart so that adding these recompiles only
// cuda_quant.cu and cuda_backend_quant.cpp). Element rules: math/quant_math.h. Every launcher
// enqueues on `stream`; small scratch buffers come from cudaMallocAsync on that stream.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/cuda_kernels.h"

namespace mixp::cuda {

// *dst = max |src| (NaN ignored), 0 for n == 0.
void launch_amax(float* dst, const float* src, int64_t n, cudaStream_t stream);
// Per channel of src [outer, channels, inner]: min/max, NaN for a channel holding NaN or inf.
void launch_minmax(float* mn, float* mx, const float* src, int64_t outer, int64_t channels,
                   int64_t inner, cudaStream_t stream);
// quantize fp8_tensor: dst bf16 bits, or the fp8 codes (bytes) when `codes`; amax (or null) as
// launch_amax.
void launch_quantize_fp8_tensor(void* dst, bool codes, float* amax, const float* src, int64_t n,
                                float scale, bool e5m2, cudaStream_t stream);
// quantize fp8_mx: rows of row_len values in blocks of `block`.
void launch_quantize_mx(uint16_t* dst, const float* src, int64_t rows, int64_t row_len, int block,
                        bool e5m2, cudaStream_t stream);
// quantize int_fake: params (host memory, copied) one per channel; mask may be null.
struct IntQ {
  float scale, inv_scale, zero_point, qmin, qmax;
};
void launch_quantize_int(float* dst, uint8_t* mask, const float* src, int64_t n,
                         const IntQ* host_params, int64_t channels, int64_t inner,
                         cudaStream_t stream);
// dsrc = ddst * mask (u8) or mask > 0 ? ddst : 0 (fp32 mask).
void launch_mask_grad(float* dsrc, const float* ddst, const void* mask, bool u8, int64_t n,
                      cudaStream_t stream);
// LowBitCodesSpec::Kind order: weight_int, weight_ternary, weight_binary, act_int, act_sign.
struct LowBitArgs {
  int kind = 3;
  float qmin = 0, qmax = 0, scale = 1;
  const float* src = nullptr;
  int64_t O = 1, K = 0;
  float* codes = nullptr;
  float* scales = nullptr;  // weight kinds
  uint8_t* mask = nullptr;  // or null
};
void launch_lowbit_codes(const LowBitArgs& a, cudaStream_t stream);
void launch_lowbit_backward(float* dsrc, const float* ddst, const uint8_t* mask, const float* inv,
                            int64_t channels, int64_t inner, int64_t n, cudaStream_t stream);
// dst = act(src * alpha + bias[col]) over [rows, n]; bias may be null.
void launch_scale_bias_act(float* dst, const float* src, const float* bias, int64_t rows, int64_t n,
                           float alpha, bool relu, cudaStream_t stream);
void launch_fp8_scale_update(float* history, int64_t n, float* scale, float* scale_inv, bool roll,
                             float amax, bool most_recent, float fp8_max, int margin,
                             cudaStream_t stream);
// dst int64 [2] = {NaN count, inf count} of a strided view with elements of `bytes` (2, 4 or 8)
// whose exponent/mantissa masks are given.
void launch_count_nonfinite(int64_t* dst, const void* src, const Shape8& shape,
                            const int64_t* stride, int bytes, uint64_t exp_mask, uint64_t man_mask,
                            cudaStream_t stream);
// Binary cross entropy in fp32 (f64 false) or fp64: loss[0] = mean (one thread, element order);
// backward writes dx / dtarget where not null.
void launch_bce(void* loss, const void* x, const void* t, int64_t n, bool logits, bool f64,
                cudaStream_t stream);
void launch_bce_backward(void* dx, void* dtarget, const void* dloss, const void* x, const void* t,
                         int64_t n, bool logits, bool f64, cudaStream_t stream);

// dst (Elem::f32 or bf16, nearest even) = src * (*sa * *sb): the emulated fp8 GEMM's scales.
void launch_scale_by_two(void* dst, Elem dst_type, const float* src, int64_t n, const float* sa,
                         const float* sb, cudaStream_t stream);

}  // namespace mixp::cuda
