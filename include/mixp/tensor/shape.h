// Shape and strides: a small inline vector of int64 (at most kMaxDims), so that building the
// metadata of a tensor never touches the heap (docs/architecture.md 7: no per-op allocations in
// steady state).
#pragma once
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <span>
#include <stdexcept>
#include <string>

namespace mixp {

inline constexpr int kMaxDims = 8;

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.end()); }
  explicit Shape(std::span<const int64_t> dims) { assign(dims.begin(), dims.end()); }
  template <class It>
  Shape(It first, It last) {
    assign(first, last);
  }
  // A shape of `n` dims all equal to `value`.
  static Shape filled(int n, int64_t value) {
    Shape s;
    s.resize(n, value);
    return s;
  }

  int size() const { return n_; }
  bool empty() const { return n_ == 0; }
  int64_t& operator[](int i) { return d_[i]; }
  int64_t operator[](int i) const { return d_[i]; }
  int64_t* begin() { return d_; }
  int64_t* end() { return d_ + n_; }
  const int64_t* begin() const { return d_; }
  const int64_t* end() const { return d_ + n_; }
  const int64_t* data() const { return d_; }
  int64_t back() const { return d_[n_ - 1]; }
  operator std::span<const int64_t>() const { return {d_, static_cast<size_t>(n_)}; }

  void push_back(int64_t v) {
    if (n_ == kMaxDims) throw std::invalid_argument("mixp: tensors have at most 8 dimensions");
    d_[n_++] = v;
  }
  void pop_back() { --n_; }
  void insert(int pos, int64_t v) {
    push_back(0);
    for (int i = n_ - 1; i > pos; --i) d_[i] = d_[i - 1];
    d_[pos] = v;
  }
  void erase(int pos) {
    for (int i = pos; i + 1 < n_; ++i) d_[i] = d_[i + 1];
    --n_;
  }
  void resize(int n, int64_t value = 0) {
    if (n > kMaxDims) throw std::invalid_argument("mixp: tensors have at most 8 dimensions");
    for (int i = n_; i < n; ++i) d_[i] = value;
    n_ = n;
  }
  // Product of the dims (1 for a scalar).
  int64_t numel() const {
    int64_t p = 1;
    for (int i = 0; i < n_; ++i) p *= d_[i];
    return p;
  }
  friend bool operator==(const Shape& a, const Shape& b) {
    return a.n_ == b.n_ && std::equal(a.begin(), a.end(), b.begin());
  }
  // "[2, 3, 4]"
  std::string str() const;

 private:
  template <class It>
  void assign(It first, It last) {
    n_ = 0;
    for (; first != last; ++first) push_back(static_cast<int64_t>(*first));
  }
  int64_t d_[kMaxDims] = {};
  int n_ = 0;
};

std::string to_string(const Shape& s);
inline std::ostream& operator<<(std::ostream& os, const Shape& s) {
  return os << s.str();
}

// Row-major (C-contiguous) strides of a shape.
Shape contiguous_strides(const Shape& shape);
// Wraps a possibly negative dim into [0, ndim); throws std::invalid_argument naming `what`.
int wrap_dim(int64_t dim, int ndim, const char* what);
// NumPy broadcasting of two shapes; throws std::invalid_argument naming both shapes and `op`.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace mixp
