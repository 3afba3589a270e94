// Helpers shared by the backends (internal): dtype dispatch, strided element access; the scalar
// math of the pointwise ops (one definition, used by ref, the cpu loops and cuda) is
// backend/math/pointwise_math.h, included here.
#pragma once
#include <cmath>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "backend/math/pointwise_math.h"  // the pointwise ops' scalar math (kern::)
#include "mixp/backend/backend.h"
#include "mixp/format/rounding.h"

namespace mixp::kern {

// Calls f(T{}) with T = float for fp32 and double for fp64; throws for other dtypes.
template <class F>
decltype(auto) dispatch_float(DType dt, const char* what, F&& f) {
  switch (dt) {
    case DType::fp32:
      return f(float{});
    case DType::fp64:
      return f(double{});
    default:
      throw std::invalid_argument(std::string("mixp backend: ") + what +
                                  " computes in fp32 or fp64, got " + std::string(mixp::name(dt)));
  }
}

template <class T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

// A view of t's storage with its own shape, strides and offset (not recorded by autograd): what
// the backends and the ops' raw helpers (ops/dispatch.h raw_view) build their views with.
inline Tensor view_of(const Tensor& t, const Shape& shape, const Shape& strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = t.storage();
  impl->offset = offset;
  impl->shape = shape;
  impl->strides = strides;
  impl->dtype = t.dtype();
  impl->device = t.device();
  return Tensor(std::move(impl));
}

// Offset of a row-major linear index in a strided tensor.
inline int64_t offset_of(const Tensor& t, int64_t linear) {
  int64_t off = 0;
  for (int d = t.dim() - 1; d >= 0; --d) {
    const int64_t n = t.shape()[d];
    off += (linear % n) * t.strides()[d];
    linear /= n;
  }
  return off;
}

// Element i (row-major) of an int64 or int32 index tensor (embedding indices, class targets);
// `what` names it in the error for another dtype ("mixp::embedding: indices").
inline int64_t index_at(const Tensor& idx, int64_t i, const char* what) {
  const int64_t off = idx.is_contiguous() ? i : offset_of(idx, i);
  if (idx.dtype() == DType::int64) return static_cast<const int64_t*>(idx.data_ptr())[off];
  if (idx.dtype() == DType::int32) return static_cast<const int32_t*>(idx.data_ptr())[off];
  throw std::invalid_argument(std::string(what) + " must be int64 or int32, got " +
                              std::string(mixp::name(idx.dtype())));
}

// Calls f(h, w) for each position of output (oh, ow)'s pooling window that lies inside the H x W
// input, row by row (padding skipped): the window walk of every pooling kernel, ref and cpu.
template <class F>
void for_each_in_window(const Pool2dParams& p, int64_t oh, int64_t ow, int64_t H, int64_t W,
                        F&& f) {
  for (int64_t kh = 0; kh < p.kernel_h; ++kh) {
    const int64_t h = oh * p.stride_h - p.pad_h + kh;
    if (h < 0 || h >= H) continue;
    for (int64_t kw = 0; kw < p.kernel_w; ++kw) {
      const int64_t w = ow * p.stride_w - p.pad_w + kw;
      if (w < 0 || w >= W) continue;
      f(h, w);
    }
  }
}

// Visits every element of `shape` in row-major order with the running offsets of N strided
// tensors: f(offsets...). The last dim is the inner loop.
template <class F>
void for_each2(const Shape& shape, const Shape& s0, const Shape& s1, F&& f) {
  const int nd = shape.size();
  if (shape.numel() == 0) return;
  if (nd == 0) {
    f(int64_t{0}, int64_t{0});
    return;
  }
  Shape idx = Shape::filled(nd, 0);
  int64_t o0 = 0, o1 = 0;
  const int64_t inner = shape[nd - 1], i0 = s0[nd - 1], i1 = s1[nd - 1];
  while (true) {
    for (int64_t i = 0; i < inner; ++i) f(o0 + i * i0, o1 + i * i1);
    int d = nd - 2;
    for (; d >= 0; --d) {
      o0 += s0[d];
      o1 += s1[d];
      if (++idx[d] < shape[d]) break;
      o0 -= shape[d] * s0[d];
      o1 -= shape[d] * s1[d];
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

template <class F>
void for_each3(const Shape& shape, const Shape& s0, const Shape& s1, const Shape& s2, F&& f) {
  const int nd = shape.size();
  if (shape.numel() == 0) return;
  if (nd == 0) {
    f(int64_t{0}, int64_t{0}, int64_t{0});
    return;
  }
  Shape idx = Shape::filled(nd, 0);
  int64_t o0 = 0, o1 = 0, o2 = 0;
  const int64_t inner = shape[nd - 1], i0 = s0[nd - 1], i1 = s1[nd - 1], i2 = s2[nd - 1];
  while (true) {
    for (int64_t i = 0; i < inner; ++i) f(o0 + i * i0, o1 + i * i1, o2 + i * i2);
    int d = nd - 2;
    for (; d >= 0; --d) {
      o0 += s0[d];
      o1 += s1[d];
      o2 += s2[d];
      if (++idx[d] < shape[d]) break;
      o0 -= shape[d] * s0[d];
      o1 -= shape[d] * s1[d];
      o2 -= shape[d] * s2[d];
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

}  // namespace mixp::kern
