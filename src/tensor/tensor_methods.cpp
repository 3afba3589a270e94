// The Tensor methods that compute or record autograd nodes, and full(): each runs the ops' code
// through the table the ops register while libmixp loads (tensor/method_hooks.h,
// src/ops/tensor_methods.cpp), so that the tensor module includes nothing of the backend, the
// graph or the ops above it (docs/architecture.md 2.2). Unset, they throw std::logic_error.
#include <atomic>
#include <stdexcept>

#include "mixp/tensor/factories.h"
#include "mixp/tensor/tensor.h"
#include "tensor/method_hooks.h"

namespace mixp {

namespace {
// Constant-initialized, so it is set before any dynamic initializer could call a method.
std::atomic<const detail::TensorMethods*> g_methods{nullptr};

const detail::TensorMethods& methods() {
  const detail::TensorMethods* m = g_methods.load(std::memory_order_acquire);
  if (!m) throw std::logic_error("mixp: Tensor methods: the ops module did not register");
  return *m;
}
}  // namespace

void detail::set_tensor_methods(const TensorMethods* m) {
  g_methods.store(m, std::memory_order_release);
}

Tensor Tensor::view(const Shape& shape) const {
  return methods().view(*this, shape);
}
Tensor Tensor::reshape(const Shape& shape) const {
  return methods().reshape(*this, shape);
}
Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  return methods().transpose(*this, d0, d1);
}
Tensor Tensor::permute(const Shape& dims) const {
  return methods().permute(*this, dims);
}
Tensor Tensor::slice(int64_t dim, int64_t start, int64_t end, int64_t step) const {
  return methods().slice(*this, dim, start, end, step);
}
Tensor Tensor::select(int64_t dim, int64_t index) const {
  return methods().select(*this, dim, index);
}
Tensor Tensor::unsqueeze(int64_t dim) const {
  return methods().unsqueeze(*this, dim);
}
Tensor Tensor::squeeze(int64_t dim) const {
  return methods().squeeze(*this, dim);
}
Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  return methods().flatten(*this, start_dim, end_dim);
}
Tensor Tensor::expand(const Shape& shape) const {
  return methods().expand(*this, shape);
}

Tensor Tensor::contiguous() const {
  return methods().contiguous(*this);
}
Tensor Tensor::clone() const {
  return methods().clone(*this);
}
Tensor Tensor::to(DType dt, Round round, Overflow overflow, uint64_t seed) const {
  return methods().to(*this, dt, round, overflow, seed);
}
// PyTorch's tensor.to(dtype) (issue 28 item 12): floating targets round to nearest even, integer
// targets truncate toward zero as a C cast does (mixp then saturates where PyTorch wraps). The
// overload above names another rounding or overflow when one is wanted.
Tensor Tensor::to(DType dt) const {
  const Round r = traits(dt).is_float() ? Round::nearest_even : Round::toward_zero;
  return to(dt, r, Overflow::ieee, 0);
}

Tensor& Tensor::zero_() {
  return fill_(0.0);
}
Tensor& Tensor::fill_(double value) {
  methods().fill_(*this, value);
  return *this;
}
Tensor& Tensor::copy_(const Tensor& src) {
  methods().copy_(*this, src);
  return *this;
}
Tensor& Tensor::add_(const Tensor& other, double alpha) {
  methods().add_(*this, other, alpha);
  return *this;
}
Tensor& Tensor::mul_(double s) {
  methods().mul_(*this, s);
  return *this;
}

Tensor full(const Shape& shape, double value, const TensorOptions& opts) {
  TensorOptions o = opts;
  o.requires_grad = false;
  Tensor t = Tensor::empty(shape, o);
  methods().fill(t, value);
  if (opts.requires_grad) t.requires_grad_(true);
  return t;
}

}  // namespace mixp
