// The Tensor methods that compute or record autograd nodes (the views, the copies, the in-place
// updates of mixp/tensor/tensor.h) and full() (mixp/tensor/factories.h) are defined in
// src/tensor/tensor_methods.cpp, which runs the ops module's code through this table: the ops
// register it while libmixp loads (src/ops/tensor_methods.cpp), as PyTorch's Tensor methods call
// the dispatcher. The tensor module itself includes nothing above format, and nothing outside
// src/tensor/ defines a Tensor member (docs/architecture.md 2.2; tests/lint/layering.py checks
// both). Each entry does exactly what the method of its name promises.
#pragma once
#include <cstdint>

#include "mixp/tensor/tensor.h"

namespace mixp::detail {

struct TensorMethods {
  // views (differentiable)
  Tensor (*view)(const Tensor& x, const Shape& shape);
  Tensor (*reshape)(const Tensor& x, const Shape& shape);
  Tensor (*transpose)(const Tensor& x, int64_t d0, int64_t d1);
  Tensor (*permute)(const Tensor& x, const Shape& dims);
  Tensor (*slice)(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step);
  Tensor (*select)(const Tensor& x, int64_t dim, int64_t index);
  Tensor (*unsqueeze)(const Tensor& x, int64_t dim);
  Tensor (*squeeze)(const Tensor& x, int64_t dim);
  Tensor (*flatten)(const Tensor& x, int64_t start_dim, int64_t end_dim);
  Tensor (*expand)(const Tensor& x, const Shape& shape);
  // copies (differentiable)
  Tensor (*contiguous)(const Tensor& x);
  Tensor (*clone)(const Tensor& x);
  Tensor (*to)(const Tensor& x, DType dtype, Round round, Overflow overflow, uint64_t seed);
  // in-place updates: check, write, bump the version
  void (*fill_)(Tensor& x, double value);
  void (*copy_)(Tensor& x, const Tensor& src);
  void (*add_)(Tensor& x, const Tensor& other, double alpha);
  void (*mul_)(Tensor& x, double s);
  // full(): the fill kernel alone (a new tensor: no check, its version stays 0)
  void (*fill)(Tensor& x, double value);
};

// Registers the ops' table (process-wide; once, at load). `methods` must outlive every call.
void set_tensor_methods(const TensorMethods* methods);

}  // namespace mixp::detail
