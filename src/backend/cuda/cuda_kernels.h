// Internal: the launchers of the CUDA kernels (cuda_pointwise.cu, cuda_rows.cu, cuda_norm.cu,
// cuda_step.cu).
// Plain C++ over raw device pointers and small by-value descriptors, so that only the .cu files
// go through nvcc and none of them includes the Tensor headers; cuda_backend.cpp turns Tensors
// into these descriptors. Every launcher enqueues on `stream` and returns without waiting; a
// launch error is reported by the caller's check (cuda_check.h).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/math/host_device.h"
#include "mixp/format/rounding.h"

namespace mixp::cuda {

inline constexpr int kMaxRank = 8;

// How an element is stored. f32/bf16/f16/tf32/e4m3/e5m2 load as fp32 and store through
// cuda_math::encode_f32; rawN moves N bytes unchanged (integer and bool tensors, same-dtype copies).
enum class Elem : uint8_t { f32, bf16, f16, tf32, e4m3, e5m2, raw1, raw2, raw4, raw8 };

// A strided view over the shape of the operation (the dst's shape); offsets in elements.
struct View {
  void* data = nullptr;
  Elem type = Elem::f32;
  int64_t stride[kMaxRank] = {};
};
struct Shape8 {
  int rank = 0;
  int64_t size[kMaxRank] = {};
  MIXP_HD int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= size[i];
    return n;
  }
};

enum class PointwiseKind : uint8_t {
  copy,         // dst = a (raw bytes when both are the same rawN type)
  convert,      // dst = round(a) with round/overflow/seed (stochastic: sr_bits(seed, i))
  fill,         // dst = s
  unary,        // dst = op(a)
  unary_bwd,    // dst = op'(g = a, x = b, y = c)
  binary,       // dst = a op b
  scalar,       // dst = a op s
  add_inplace,  // dst += s * a
  dropout,      // dst = keep(seed, i) ? a * s : 0, threshold in `threshold`
};
struct PointwiseArgs {
  PointwiseKind kind = PointwiseKind::copy;
  int op = 0;
  Shape8 shape;
  View dst, a, b, c;
  float s = 0;
  Round round = Round::nearest_even;
  Overflow overflow = Overflow::ieee;
  uint64_t seed = 0;
  uint32_t threshold = 0;
};
void launch_pointwise(const PointwiseArgs& args, cudaStream_t stream);

// reduce sum/mean/max (op: 0, 1, 2 as mixp::ReduceOp) of src over the dims where dst has size 1
// and src more; dst contiguous in dst_shape (keepdim form). Accumulates in fp32.
struct ReduceArgs {
  int op = 0;
  Shape8 src_shape;
  View src;
  void* dst = nullptr;
  Elem dst_type = Elem::f32;
  Shape8 dst_shape;
};
void launch_reduce(const ReduceArgs& args, cudaStream_t stream);

// Row kernels on contiguous fp32 [rows, n] data.
void launch_softmax(float* dst, const float* src, int64_t rows, int64_t n, bool log,
                    cudaStream_t stream);
void launch_softmax_backward(float* dsrc, const float* ddst, const float* dst, int64_t rows,
                             int64_t n, bool log, cudaStream_t stream);
// weight/bias may be null.
void launch_layer_norm(float* dst, float* mean, float* rstd, const float* src, const float* weight,
                       const float* bias, int64_t rows, int64_t n, float eps, cudaStream_t stream);
// dweight/dbias may be null; they are overwritten (accumulated in fp32 in a second pass).
void launch_layer_norm_backward(float* dsrc, float* dweight, float* dbias, const float* ddst,
                                const float* src, const float* weight, const float* mean,
                                const float* rstd, int64_t rows, int64_t n, cudaStream_t stream);
// dst (bf16 or fp16 bits, Elem::bf16/f16) = (src - mean) * rstd rounded to nearest even.
void launch_layer_norm_xhat(void* dst, Elem dst_type, const float* src, const float* mean,
                            const float* rstd, int64_t rows, int64_t n, cudaStream_t stream);
// loss[0] = mean over rows of (lse - x[t]); lse[rows]. targets int64 (idx64) or int32. Rows are
// `ld` >= n floats apart; only the first n columns are classes (ld > n: the fused classifier's
// padded logits, whose backward writes 0 to the padding and may run in place, dlogits == logits).
void launch_cross_entropy(float* loss, float* lse, const float* logits, const void* targets,
                          bool idx64, int64_t rows, int64_t n, int64_t ld, cudaStream_t stream);
void launch_cross_entropy_backward(float* dlogits, const float* dloss, const float* logits,
                                   const void* targets, bool idx64, const float* lse, int64_t rows,
                                   int64_t n, int64_t ld, cudaStream_t stream);
void launch_embedding(float* dst, const float* weight, const void* idx, bool idx64, int64_t count,
                      int64_t dim, int64_t vocab, cudaStream_t stream);
void launch_embedding_backward(float* dweight, const float* ddst, const void* idx, bool idx64,
                               int64_t count, int64_t dim, int64_t vocab, cudaStream_t stream);
// dst int64 [outer, inner] = argmax over the middle dim of contiguous src [outer, n, inner].
void launch_argmax(int64_t* dst, const void* src, Elem type, int64_t outer, int64_t n,
                   int64_t inner, cudaStream_t stream);

// Attention on contiguous [BH, T, D] q/k/v/out of one Elem type (fp32, bf16 or fp16), lse fp32
// [BH, Tq]. Backward: dq32/dk32/dv32 fp32 [.., D], dk32/dv32 zeroed by the caller (accumulated).
struct AttnArgs {
  int64_t BH = 0, Tq = 0, Tk = 0, D = 0;
  bool causal = false;
  float scale = 1.0f;
  Elem type = Elem::f32;
  size_t elem_bytes = 4;
  const void *q = nullptr, *k = nullptr, *v = nullptr;
  void* out = nullptr;  // forward: written; backward: read (the forward's output)
  float* lse = nullptr;
  const void* dout = nullptr;
  float *dq32 = nullptr, *dk32 = nullptr, *dv32 = nullptr;
};
void launch_attention_forward(const AttnArgs& a, cudaStream_t stream);
void launch_attention_backward(const AttnArgs& a, cudaStream_t stream);

// Step kernels.
// g (fp32 or 16-bit Elem) *= inv (unless inv == 1); *found_inf = 1 if an element was not finite.
void launch_unscale_check(void* g, Elem type, int64_t n, float inv, float* found_inf,
                          cudaStream_t stream);
// *dst (fp64) = sum of squares of src (fp32) in fp64; partial sums per block, then one block.
void launch_sum_squares(double* dst, const float* src, int64_t n, cudaStream_t stream);

struct OptimArgs {
  bool adam = true;
  float s[9] = {};  // adam: AdamScalars order; sgd: lr, wd, mom, damp1
  bool sgd_first = false, sgd_nesterov = false, sgd_momentum = false, sgd_wd = false;
  int64_t n = 0;
  // The fp32 values updated in place: an fp32 parameter or the master of a narrow one; null for
  // a narrow parameter without a master (then it is widened per element from `param`).
  float* w = nullptr;
  const void* g = nullptr;   // gradient, g_type
  Elem g_type = Elem::f32;
  float* slot0 = nullptr;    // Adam m / SGD momentum buffer (fp32)
  float* slot1 = nullptr;    // Adam v
  // The narrow parameter (param_type), rewritten from the new values with write_back, or null.
  void* param = nullptr;
  Elem param_type = Elem::bf16;
  void* comp = nullptr;      // Kahan buffer (param_type, no master), or null
  Round write_back = Round::nearest_even;
  Overflow overflow = Overflow::ieee;
  uint64_t seed = 0;
  // Element i draws sr_bits(seed, offset + i): a ZeRO 3 row shard's place in its whole parameter
  // (backend.h ParamUpdate::offset).
  uint64_t offset = 0;
  void* shadow = nullptr;    // weight shadow (shadow_type) rewritten from the new w, or null
  Elem shadow_type = Elem::bf16;
};
void launch_optimizer_update(const OptimArgs& a, cudaStream_t stream);

}  // namespace mixp::cuda
