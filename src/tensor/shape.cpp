#include "mixp/tensor/shape.h"

#include <fmt/format.h>

namespace mixp {

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < n_; ++i) {
    if (i) s += ", ";
    s += std::to_string(d_[i]);
  }
  return s + "]";
}

std::string to_string(const Shape& s) {
  return s.str();
}

Shape contiguous_strides(const Shape& shape) {
  Shape st = Shape::filled(shape.size(), 1);
  int64_t acc = 1;
  for (int i = shape.size() - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= std::max<int64_t>(shape[i], 1);
  }
  return st;
}

int wrap_dim(int64_t dim, int ndim, const char* what) {
  const int64_t n = std::max(ndim, 1);  // a scalar accepts dim 0 / -1
  if (dim < -n || dim >= n) {
    throw std::invalid_argument(
        fmt::format("mixp::{}: dim {} out of range for a tensor of {} dims", what, dim, ndim));
  }
  return static_cast<int>(dim < 0 ? dim + n : dim);
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const int n = std::max(a.size(), b.size());
  Shape out = Shape::filled(n, 1);
  for (int i = 0; i < n; ++i) {
    const int ia = a.size() - n + i, ib = b.size() - n + i;
    const int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    if (da != db && da != 1 && db != 1) {
      throw std::invalid_argument(fmt::format(
          "mixp::{}: shapes {} and {} cannot be broadcast together", op, a.str(), b.str()));
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace mixp
