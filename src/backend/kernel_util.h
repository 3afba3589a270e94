// Helpers shared by the backends (internal): dtype dispatch, strided element access, the
// scalar math of the pointwise ops (one definition, used by ref and by the cpu loops).
#pragma once
#include <cmath>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

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

// --- scalar math of the pointwise ops
inline constexpr double kSqrt2OverPi = 0.7978845608028654;  // sqrt(2/pi)
inline constexpr double kGeluCoeff = 0.044715;

template <class T>
inline T gelu_fwd(T x) {
  const T u = T(kSqrt2OverPi) * (x + T(kGeluCoeff) * x * x * x);
  return T(0.5) * x * (T(1) + std::tanh(u));
}
// d/dx of the tanh-approximated GELU.
template <class T>
inline T gelu_grad(T x) {
  const T u = T(kSqrt2OverPi) * (x + T(kGeluCoeff) * x * x * x);
  const T t = std::tanh(u);
  const T du = T(kSqrt2OverPi) * (T(1) + T(3 * kGeluCoeff) * x * x);
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du;
}

// Exact GELU (PyTorch's default, approximate='none'): 0.5 x (1 + erf(x / sqrt 2)), and its
// derivative 0.5 (1 + erf(x / sqrt 2)) + x exp(-x^2 / 2) / sqrt(2 pi). sin, cos and the exact GELU
// are evaluated in double for fp32 too (one rounding of the result): the reference is the
// oracle of the cpu kernels (vec_kernels.inc), which compute these in double as well.
inline constexpr double kSqrt1_2 = 0.70710678118654752440;     // 1/sqrt(2)
inline constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1/sqrt(2 pi)
inline double gelu_erf_fwd(double x) {
  return 0.5 * x * (1.0 + std::erf(x * kSqrt1_2));
}
inline double gelu_erf_grad(double x) {
  return 0.5 * (1.0 + std::erf(x * kSqrt1_2)) + x * std::exp(-0.5 * x * x) * kInvSqrt2Pi;
}

template <class T>
inline T unary_fwd(UnaryOp op, T x) {
  switch (op) {
    case UnaryOp::neg:
      return -x;
    case UnaryOp::exp:
      return std::exp(x);
    case UnaryOp::log:
      return std::log(x);
    case UnaryOp::sqrt:
      return std::sqrt(x);
    case UnaryOp::relu:
      return x > T(0) ? x : T(0);
    case UnaryOp::gelu:
      return gelu_fwd(x);
    case UnaryOp::tanh:
      return std::tanh(x);
    case UnaryOp::sigmoid:
      return T(1) / (T(1) + std::exp(-x));
    case UnaryOp::sin:
      return static_cast<T>(std::sin(static_cast<double>(x)));
    case UnaryOp::cos:
      return static_cast<T>(std::cos(static_cast<double>(x)));
    case UnaryOp::gelu_erf:
      return static_cast<T>(gelu_erf_fwd(static_cast<double>(x)));
  }
  return x;
}

// g * op'(x) given x (src) and y (dst).
template <class T>
inline T unary_bwd(UnaryOp op, T g, T x, T y) {
  switch (op) {
    case UnaryOp::neg:
      return -g;
    case UnaryOp::exp:
      return g * y;
    case UnaryOp::log:
      return g / x;
    case UnaryOp::sqrt:
      return g / (T(2) * y);
    case UnaryOp::relu:
      return y > T(0) ? g : T(0);
    case UnaryOp::gelu:
      return g * gelu_grad(x);
    case UnaryOp::tanh:
      return g * (T(1) - y * y);
    case UnaryOp::sigmoid:
      return g * y * (T(1) - y);
    case UnaryOp::sin:
      return g * static_cast<T>(std::cos(static_cast<double>(x)));
    case UnaryOp::cos:
      return -g * static_cast<T>(std::sin(static_cast<double>(x)));
    case UnaryOp::gelu_erf:
      return g * static_cast<T>(gelu_erf_grad(static_cast<double>(x)));
  }
  return g;
}
inline bool unary_bwd_needs_src(UnaryOp op) {
  return op == UnaryOp::gelu || op == UnaryOp::log || op == UnaryOp::sin || op == UnaryOp::cos ||
         op == UnaryOp::gelu_erf;
}
inline bool unary_bwd_needs_dst(UnaryOp op) {
  return op == UnaryOp::exp || op == UnaryOp::sqrt || op == UnaryOp::relu || op == UnaryOp::tanh ||
         op == UnaryOp::sigmoid;
}

template <class T>
inline T binary_fwd(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::add:
      return a + b;
    case BinaryOp::sub:
      return a - b;
    case BinaryOp::mul:
      return a * b;
    case BinaryOp::div:
      return a / b;
  }
  return a;
}

template <class T>
inline T scalar_fwd(ScalarOp op, T x, T s) {
  switch (op) {
    case ScalarOp::add:
      return x + s;
    case ScalarOp::mul:
      return x * s;
    case ScalarOp::pow:
      return std::pow(x, s);
    case ScalarOp::rsub:
      return s - x;
    case ScalarOp::rdiv:
      return s / x;
  }
  return x;
}

// Dropout keep decision for element i: keep iff hash(seed, i) >= p * 2^32.
inline uint32_t dropout_threshold(double p) {
  const double t = p * 4294967296.0;
  return t >= 4294967295.0 ? 0xFFFFFFFFu : static_cast<uint32_t>(t);
}
inline bool dropout_keep(uint64_t seed, uint64_t i, uint32_t threshold) {
  return sr_bits(seed, i) >= threshold;
}

}  // namespace mixp::kern
