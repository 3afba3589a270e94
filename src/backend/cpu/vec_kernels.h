// Vectorized fp32 row kernels of the cpu backend, in three tiers (docs/architecture.md 6.6): the
// same source (vec_kernels.inc) is compiled for baseline x86-64 (vec_generic.cpp), AVX2+FMA
// (vec_avx2.cpp) and AVX-512 (vec_avx512.cpp); vec() picks one at run time from simd_tier().
// The loops are written branch-free so GCC vectorizes them at each tier's width; exp is a
// Cephes-style polynomial (max error ~2 ulp over the normal range) instead of a libm call,
// which GCC cannot vectorize without -ffast-math.
#pragma once
#include <cstdint>

#include "mixp/backend/backend.h"

namespace mixp::vec {

struct Kernels {
  const char* tier;
  // y = op(x), n elements (op: any UnaryOp)
  void (*unary)(UnaryOp op, float* y, const float* x, int64_t n);
  // gi = g * op'(x, y)
  void (*unary_bwd)(UnaryOp op, float* gi, const float* g, const float* x, const float* y,
                    int64_t n);
  // Softmax / log-softmax of `rows` contiguous rows of length n.
  void (*softmax_rows)(float* y, const float* x, int64_t rows, int64_t n, bool log);
  void (*softmax_bwd_rows)(float* gi, const float* g, const float* y, int64_t rows, int64_t n,
                           bool log);
  // log(sum(exp(x))) of one row.
  float (*logsumexp)(const float* x, int64_t n);
  // In place on one row of scores: s[j] = exp(s[j] - lse) for j < valid, 0 for j >= valid; returns
  // lse.
  float (*softmax_inplace_masked)(float* s, int64_t valid, int64_t n);
  // y = exp(x - c), n elements.
  void (*exp_shift)(float* y, const float* x, float c, int64_t n);
  // Layer norm of rows (w/b may be null): y, mean[r], rstd[r].
  void (*layer_norm_rows)(float* y, float* mean, float* rstd, const float* x, const float* w,
                          const float* b, int64_t rows, int64_t n, float eps);
  // Its input gradient for rows; accumulates dw/db (when non-null) into the given buffers.
  void (*layer_norm_bwd_rows)(float* gx, float* dw, float* db, const float* g, const float* x,
                              const float* w, const float* mean, const float* rstd, int64_t rows,
                              int64_t n);
  // 2x2 stride-2 max pooling of one H x W plane (ties and NaN: the first in row-major order).
  void (*maxpool2x2)(float* y, const float* x, int64_t W, int64_t OH, int64_t OW);
  // Its backward: writes every position of the 2*OH x 2*OW window area of gi.
  void (*maxpool2x2_bwd)(float* gi, const float* g, const float* x, int64_t W, int64_t OH,
                         int64_t OW);
  // Row primitives for batch norm: sum; sum of (x - m)^2; y = a x + b;
  // sum g and sum g (x - m); gx = k1 (g - k2 - (x - m) k3).
  float (*sum)(const float* x, int64_t n);
  float (*sum_sq_dev)(const float* x, int64_t n, float m);
  void (*affine)(float* y, const float* x, int64_t n, float a, float b);
  void (*sum_g_gx)(const float* g, const float* x, int64_t n, float m, float* sg, float* sgx);
  void (*bn_bwd_apply)(float* gx, const float* g, const float* x, int64_t n, float m, float k1,
                       float k2, float k3);
  // GELU and its backward on bf16 storage (bits), widening in registers and rounding the result
  // to nearest even: the same values as widening, running unary/unary_bwd and narrowing, without
  // the conversion passes. Null in tiers that lack them (the caller converts in blocks then).
  void (*gelu_bf16)(uint16_t* y, const uint16_t* x, int64_t n);
  void (*gelu_bwd_bf16)(uint16_t* gi, const uint16_t* g, const uint16_t* x, int64_t n);
};

const Kernels& kernels();  // the tier simd_tier() allows
const Kernels& kernels_generic();
const Kernels& kernels_avx2();
const Kernels& kernels_avx512();

}  // namespace mixp::vec
