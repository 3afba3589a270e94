// Layout adapters of the cpu backend (internal): the fast kernels want contiguous operands and a
// reduction (or softmax) over trailing dims. Rather than send strided views, a softmax over
// another dim or a reduction over scattered dims to the scalar reference loops, the backend
// rearranges its operands with these views and its own strided copy, then runs the fast kernel.
#pragma once
#include "backend/cpu/cpu_parallel.h"
#include "mixp/backend/backend.h"

namespace mixp::cpu {

// Sizes (or strides) `s` seen through perm: entry i is s[perm[i]].
inline Shape permuted_shape(const Shape& s, const Shape& perm) {
  Shape r;
  for (int i = 0; i < perm.size(); ++i) r.push_back(s[static_cast<int>(perm[i])]);
  return r;
}

// A view of t (shared storage, no autograd) whose dim i is t's dim perm[i].
inline Tensor permuted_view(const Tensor& t, const Shape& perm) {
  return view_of(t, permuted_shape(t.shape(), perm), permuted_shape(t.strides(), perm),
                 t.storage_offset());
}

// For a reduction src -> dst (dst keeps the reduced dims with size 1): the dims of src that are
// kept first, then the reduced ones, each group in its original order. Permuted so, the reduced
// dims form one trailing block and dst's contiguous layout is unchanged.
inline Shape kept_dims_first(const Shape& src, const Shape& dst) {
  Shape perm;
  for (int d = 0; d < src.size(); ++d)
    if (dst[d] == src[d]) perm.push_back(d);
  for (int d = 0; d < src.size(); ++d)
    if (dst[d] != src[d]) perm.push_back(d);
  return perm;
}

// The permutation that moves dim `dim` to the end.
inline Shape dim_last(int ndim, int dim) {
  Shape perm;
  for (int d = 0; d < ndim; ++d)
    if (d != dim) perm.push_back(d);
  perm.push_back(dim);
  return perm;
}


// t itself when it is contiguous (or absent), else a contiguous copy made by `be` (whose copy of a
// same-dtype strided view is a strided loop, not a reference kernel).
inline Tensor dense(Backend& be, const Tensor& t) {
  if (!t.defined() || t.is_contiguous()) return t;
  Tensor c = Tensor::empty(t.shape(), {.dtype = t.dtype()});
  be.copy(c, t);
  return c;
}

// A contiguous tensor to write a result into: dst itself when contiguous, else a fresh buffer that
// the caller copies into dst afterwards (write_back).
inline Tensor dense_out(const Tensor& dst) {
  return dst.is_contiguous() ? dst : Tensor::empty(dst.shape(), {.dtype = dst.dtype()});
}
inline void write_back(Backend& be, Tensor& dst, const Tensor& out) {
  if (!dst.is_contiguous()) be.copy(dst, out);
}

}  // namespace mixp::cpu
