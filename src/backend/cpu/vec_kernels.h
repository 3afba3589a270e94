// Vectorized fp32 row kernels of the cpu backend, in three tiers (DESIGN.md 6.6): the same source
// (vec_kernels.inc) is compiled for baseline x86-64 (vec_generic.cpp), AVX2+FMA
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
  void (*unary_bwd)(UnaryOp op, float* gi, const float* g, const float* x, const float* y, int64_t n);
  // Softmax / log-softmax of `rows` contiguous rows of length n.
  void (*softmax_rows)(float* y, const float* x, int64_t rows, int64_t n, bool log);
  void (*softmax_bwd_rows)(float* gi, const float* g, const float* y, int64_t rows, int64_t n, bool log);
  // log(sum(exp(x))) of one row.
  float (*logsumexp)(const float* x, int64_t n);
  // In place on one row of scores: s[j] = exp(s[j] - lse) for j < valid, 0 for j >= valid; returns lse.
  float (*softmax_inplace_masked)(float* s, int64_t valid, int64_t n);
  // y = exp(x - c), n elements.
  void (*exp_shift)(float* y, const float* x, float c, int64_t n);
  // Layer norm of rows (w/b may be null): y, mean[r], rstd[r].
  void (*layer_norm_rows)(float* y, float* mean, float* rstd, const float* x, const float* w, const float* b,
                          int64_t rows, int64_t n, float eps);
  // Its input gradient for rows; accumulates dw/db (when non-null) into the given buffers.
  void (*layer_norm_bwd_rows)(float* gx, float* dw, float* db, const float* g, const float* x, const float* w,
                              const float* mean, const float* rstd, int64_t rows, int64_t n);
};

const Kernels& kernels();           // the tier simd_tier() allows
const Kernels& kernels_generic();
const Kernels& kernels_avx2();
const Kernels& kernels_avx512();

}  // namespace mixp::vec
