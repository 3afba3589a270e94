// The tensor methods and factories that compute (the in-place updates of mixp/tensor/tensor.h and
// full() of mixp/tensor/factories.h): they live with the ops, above the backend they call, so that
// the tensor module itself never reaches up to the backend (docs/architecture.md 2.2).
#include <stdexcept>
#include <string>

#include "mixp/autograd/grad_mode.h"
#include "mixp/backend/backend.h"
#include "mixp/tensor/factories.h"
#include "mixp/tensor/tensor.h"

namespace mixp {

namespace {
void check_inplace(const Tensor& t, const char* what) {
  if (!t.defined())
    throw std::logic_error(std::string("mixp: ") + what + " on an undefined tensor");
  if (t.requires_grad() && GradMode::is_enabled()) {
    throw std::logic_error(std::string("mixp: ") + what +
                           " on a tensor that requires grad while grad mode is on; "
                           "wrap the update in NoGradGuard or use detach()");
  }
}
}  // namespace

Tensor& Tensor::zero_() {
  return fill_(0.0);
}

Tensor& Tensor::fill_(double value) {
  check_inplace(*this, "fill_");
  backend_for(*this).fill(*this, value);
  bump_version();
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  check_inplace(*this, "copy_");
  const Shape bs = broadcast_shapes(shape(), src.shape(), "copy_");
  if (!(bs == shape())) {
    throw std::invalid_argument("mixp::copy_: source shape " + src.shape().str() +
                                " does not broadcast to " + shape().str());
  }
  backend_for(*this).copy(*this, src.shape() == shape() ? src : src.detach().expand(shape()));
  bump_version();
  return *this;
}

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  check_inplace(*this, "add_");
  const Shape bs = broadcast_shapes(shape(), other.shape(), "add_");
  if (!(bs == shape())) {
    throw std::invalid_argument("mixp::add_: shape " + other.shape().str() +
                                " does not broadcast to " + shape().str());
  }
  backend_for(*this).add_inplace(
      *this, other.shape() == shape() ? other : other.detach().expand(shape()), alpha);
  bump_version();
  return *this;
}

Tensor& Tensor::mul_(double s) {
  check_inplace(*this, "mul_");
  if (dtype() != DType::fp32 && dtype() != DType::fp64) {
    Tensor tmp = to(DType::fp32).detach();
    backend_for(tmp, tmp).scalar(ScalarOp::mul, tmp, tmp, s);
    backend_for(*this, tmp).copy(*this, tmp);
  } else {
    backend_for(*this, *this).scalar(ScalarOp::mul, *this, *this, s);
  }
  bump_version();
  return *this;
}

Tensor full(const Shape& shape, double value, const TensorOptions& opts) {
  TensorOptions o = opts;
  o.requires_grad = false;
  Tensor t = Tensor::empty(shape, o);
  backend_for(t).fill(t, value);
  if (opts.requires_grad) t.requires_grad_(true);
  return t;
}
}  // namespace mixp
