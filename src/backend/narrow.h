// Helpers for kernels whose operands may be stored in a 16-bit format (bf16, fp16) while they
// compute in fp32 (pointwise) or fp64 (the ref GEMMs): widening views, and running a kernel on a
// wider copy of dst (internal to backends and op front ends); and which 8-bit float operands a
// GEMM takes.
#pragma once
#include <initializer_list>

#include "mixp/backend/backend.h"
#include "mixp/tensor/tensor.h"

namespace mixp::kern {

inline bool is_narrow(DType d) {
  return d == DType::bf16 || d == DType::fp16;
}
inline bool is_fp8(DType d) {
  return d == DType::fp8_e4m3 || d == DType::fp8_e5m2;
}
// The FP8 GEMM pairs of cuBLASLt (and TransformerEngine): E4M3 x E4M3, E4M3 x E5M2, E5M2 x E4M3.
inline bool is_fp8_gemm_pair(DType a, DType b) {
  return is_fp8(a) && is_fp8(b) && !(a == DType::fp8_e5m2 && b == DType::fp8_e5m2);
}
inline bool any_narrow(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (t->defined() && is_narrow(t->dtype())) return true;
  }
  return false;
}

// t's values converted to dtype `to` (rounding `round`, IEEE overflow), with t's shape and
// strides: the storage span the view covers is converted with one backend convert call when it
// is not much larger than the view (dense, transposed, broadcast views), else t is gathered into
// a contiguous tensor. `label` relabels a 4-byte result (tf32 values used as fp32). Undefined
// stays undefined; a tensor already of dtype `to` is returned as it is.
Tensor convert_view(Backend& be, const Tensor& t, DType to, Round round, DType label);
inline Tensor convert_view(Backend& be, const Tensor& t, DType to,
                           Round round = Round::nearest_even) {
  return convert_view(be, t, to, round, to);
}
// Exact widening of a narrow tensor to `to` (fp32 or fp64); other tensors are returned as they are.
inline Tensor widen(Backend& be, const Tensor& t, DType to) {
  return t.defined() && is_narrow(t.dtype()) ? convert_view(be, t, to) : t;
}

// Runs f(d) where d is dst itself if it has dtype c, else a contiguous tensor of dtype c (filled
// from dst first when read_dst), whose values are then rounded into dst (nearest even).
template <class F>
void with_dst_as(Backend& be, Tensor& dst, DType c, bool read_dst, F&& f) {
  if (!dst.defined() || dst.dtype() == c) {
    f(dst);
    return;
  }
  Tensor d = Tensor::empty(dst.shape(), {.dtype = c});
  if (read_dst) be.copy(d, dst);
  f(d);
  be.convert(dst, d, Round::nearest_even, Overflow::ieee, 0);
}

}  // namespace mixp::kern
