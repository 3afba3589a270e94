// Internal: the launchers of the cnn's kernels on cuda (cuda_nn.cu): pooling and its gradients,
// im2col / col2im and the bias of the GEMM convolution (cuda_backend_nn.cpp runs the GEMMs through
// cuBLASLt), batch norm, reduce_max_backward. Element rules: math/nn_math.h. Contiguous NCHW
// operands of any float Elem, loaded as fp32 and stored nearest-even.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/math/nn_math.h"

namespace mixp::cuda {

void launch_max_pool(void* dst, const void* src, Elem t, const cuda_math::PoolShape& p,
                     cudaStream_t stream);
void launch_max_pool_backward(void* dsrc, const void* ddst, const void* src, Elem t,
                              const cuda_math::PoolShape& p, cudaStream_t stream);
void launch_avg_pool(void* dst, const void* src, Elem t, const cuda_math::PoolShape& p,
                     cudaStream_t stream);
void launch_avg_pool_backward(void* dsrc, const void* ddst, Elem t, const cuda_math::PoolShape& p,
                              cudaStream_t stream);
// col (ct) [N, C*KH*KW, OH*OW] from src (st) [N, C, H, W].
void launch_im2col(void* col, Elem ct, const void* src, Elem st, const cuda_math::ConvShape& g,
                   cudaStream_t stream);
// dsrc (t) [N, C, H, W] from dcol (fp32) [N, C*KH*KW, OH*OW].
void launch_col2im(void* dsrc, Elem t, const float* dcol, const cuda_math::ConvShape& g,
                   cudaStream_t stream);
// dst (t) [N, O, S] = y32 + bias[o] (bias of Elem bt, or null), rounded once.
void launch_conv_bias(void* dst, Elem t, const float* y32, const void* bias, Elem bt, int64_t N,
                      int64_t O, int64_t S, cudaStream_t stream);
// Batch norm over [N, C, S] fp32 (ref_reduce.cpp's formulas; sums in double, one block per
// channel). weight/bias/running_* may be null.
struct BatchNormArgs {
  int64_t N = 0, C = 0, S = 0;
  const float* src = nullptr;
  float* dst = nullptr;
  float *save_mean = nullptr, *save_invstd = nullptr;
  float *running_mean = nullptr, *running_var = nullptr;
  const float *weight = nullptr, *bias = nullptr;
  bool training = true;
  double momentum = 0.1, eps = 1e-5;
  // backward
  const float* ddst = nullptr;
  float *dsrc = nullptr, *dweight = nullptr, *dbias = nullptr;
};
void launch_batch_norm(const BatchNormArgs& a, cudaStream_t stream);
void launch_batch_norm_backward(const BatchNormArgs& a, cudaStream_t stream);
// reduce_max_backward over src's shape: m and g are dst and ddst broadcast to it (stride 0 on the
// reduced dims), count_stride the contiguous strides of dst's shape with 0 on the reduced dims.
struct MaxBackwardArgs {
  Shape8 shape;
  View src, m, g, dsrc;
  int64_t count_stride[kMaxRank] = {};
  int64_t groups = 0;  // dst.numel()
};
void launch_reduce_max_backward(const MaxBackwardArgs& a, cudaStream_t stream);

}  // namespace mixp::cuda
