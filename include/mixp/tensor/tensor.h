// Tensor: shape, strides, dtype, device, shared storage, views, and the autograd fields.
//
// A Tensor is a handle (like torch::Tensor): copying it shares the same TensorImpl; views (reshape,
// transpose, permute, slice, expand) share the Storage with their own shape/strides/offset.
// Strides and offsets count elements, not bytes. Any registered dtype can be stored, one element
// per traits(dtype).storage_bytes (sub-byte formats are stored unpacked, one per byte).
//
// Ops compute in fp32 (fp64 when an input is fp64) and accumulate in fp32; see ops/ops.h for how
// a result's dtype is chosen. Narrowing conversions always name their rounding
// (docs/architecture.md 6.2).
#pragma once
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <source_location>
#include <string>
#include <vector>

#include "mixp/format/dtype.h"
#include "mixp/format/rounding.h"
#include "mixp/tensor/device.h"
#include "mixp/tensor/shape.h"

namespace mixp {

class Node;
class Tensor;
class CachingAllocator;

// One allocation. Freed back to the caching allocator when the last tensor viewing it goes away.
//
// `version` counts in-place writes (PyTorch's `_version`): every in-place entry point of the API
// (zero_, fill_, copy_, add_, mul_, set_at, the optimizers' parameter updates, checkpoint and
// state-dict loading) bumps it, and it lives here so that all views of the storage share it.
// Writes through raw pointers (data<T>(), data_ptr()) cannot be seen: code that writes a tensor's
// values that way must call Tensor::bump_version() afterwards. What relies on it: amp's weight
// shadows (amp/weight_shadow.h) are used only while the version they were made at is current.
//
// `device` says which backend may compute on the bytes (backend_for, backend/backend.h) and
// `allocator` which allocator owns them (null for memory the caller owns, from_blob).
struct Storage {
  void* data = nullptr;
  size_t nbytes = 0;
  Device device = Device::cpu();
  CachingAllocator* allocator = nullptr;
  size_t block_size = 0;             // the allocator block's real size
  bool owned = true;                 // false when wrapping memory the caller owns (from_blob)
  std::atomic<uint64_t> version{0};  // in-place writes so far (see above)
  Storage(size_t nbytes, Device device);
  Storage(void* external, size_t nbytes, Device device);  // not owned
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Shape shape;
  Shape strides;
  DType dtype = DType::fp32;
  Device device = Device::cpu();
  // autograd
  bool requires_grad = false;
  // Set by a module above that keeps data keyed by this impl (amp's cache of low-precision weight
  // copies, amp/weight_shadow.h): its destruction then calls the one process-wide release
  // callback that module registered (src/tensor/release_hook.h), which frees that data at once.
  // Unflagged impls (nearly all) pay one test of this byte.
  bool notify_release = false;
  uint32_t output_nr = 0;                // which output of grad_fn this tensor is
  std::shared_ptr<Node> grad_fn;         // null for leaves
  std::shared_ptr<TensorImpl> grad;      // accumulated gradient (leaves)
  std::weak_ptr<Node> grad_accumulator;  // cached AccumulateGrad node of a leaf

  ~TensorImpl() {
    if (notify_release) released();
  }

 private:
  void released();
};

struct TensorOptions {
  DType dtype = DType::fp32;
  Device device = default_device();  // cpu unless a DefaultDeviceGuard says otherwise
  bool requires_grad = false;
};

class Tensor {
 public:
  Tensor() = default;  // an undefined tensor (no storage); defined() is false
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}
  // A new contiguous, uninitialized tensor from the caching allocator.
  static Tensor empty(const Shape& shape, const TensorOptions& opts = {});

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

  // --- metadata
  const Shape& shape() const { return impl_->shape; }
  const Shape& strides() const { return impl_->strides; }
  int dim() const { return impl_->shape.size(); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t stride(int64_t d) const;
  int64_t numel() const { return impl_->shape.numel(); }
  int64_t storage_offset() const { return impl_->offset; }
  DType dtype() const { return impl_->dtype; }
  Device device() const { return impl_->device; }
  size_t element_size() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  bool is_contiguous() const;
  bool is_floating_point() const { return traits(dtype()).is_float(); }
  const std::shared_ptr<Storage>& storage() const { return impl_->storage; }

  // --- raw data (the first element of this view). Code that writes values through these must
  // call bump_version() afterwards (see Storage::version), or stale derived copies may be used.
  // Only backends compute on raw data: on a guarded tensor (device.h) these throw outside a
  // backend call (a DeviceAccessScope), naming the caller's file and line.
  void* data_ptr(std::source_location caller = std::source_location::current()) const;
  template <class T>
  T* data(std::source_location caller = std::source_location::current()) const {
    check_dtype(dtype_of_v<T>);
    return static_cast<T*>(data_ptr(caller));
  }

  // --- host access: a copy of this tensor on `device` (this tensor when it is already there),
  // not recorded. The one way host code reads device data (data loading, serialization,
  // printing: t.to(Device::cpu())); item(), at(), set_at() and to_vector() use it.
  Tensor to(Device device) const;

  // --- element access, for tests and small host-side work. Values convert through double.
  double item() const;  // numel must be 1
  template <class T>
  T item() const {
    return static_cast<T>(item());
  }
  double at(std::initializer_list<int64_t> index) const;
  // Stores v with round-to-nearest-even (saturating for integers).
  void set_at(std::initializer_list<int64_t> index, double v);
  // Every element in row-major order, converted to T.
  template <class T = double>
  std::vector<T> to_vector() const {
    const std::vector<double> v = to_double_vector();
    return std::vector<T>(v.begin(), v.end());
  }
  std::vector<double> to_double_vector() const;

  // --- conversions (differentiable: the gradient flows back converted to this tensor's dtype)
  // `seed` is read only by Round::stochastic (element i uses sr_bits(seed, i)).
  Tensor to(DType dtype, Round round, Overflow overflow = Overflow::ieee, uint64_t seed = 0) const;
  // As PyTorch's tensor.to(dtype): a floating target rounds to nearest even with IEEE overflow
  // (inf/NaN where the format has them), an integer target truncates toward zero (and
  // saturates). Widening conversions are exact.
  Tensor to(DType dtype) const;
  Tensor contiguous() const;  // this tensor when already contiguous, else a copy (differentiable)
  Tensor clone() const;       // always a contiguous copy (differentiable)

  // --- views (differentiable). Negative dims count from the end.
  Tensor view(const Shape& shape) const;     // needs compatible strides; -1 infers one dim
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a copy
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const { return transpose(0, 1); }
  Tensor permute(const Shape& dims) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;  // slice of length 1, dim removed
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor expand(const Shape& shape) const;  // broadcast view (stride 0); -1 keeps a dim

  // --- autograd
  bool requires_grad() const { return impl_->requires_grad; }
  // Only leaves may change this. Returns *this for chaining: randn(...).requires_grad_()
  Tensor& requires_grad_(bool on = true);
  bool is_leaf() const { return impl_->grad_fn == nullptr; }
  const std::shared_ptr<Node>& grad_fn() const { return impl_->grad_fn; }
  uint32_t output_nr() const { return impl_->output_nr; }
  Tensor grad() const { return Tensor(impl_->grad); }  // undefined until a backward reaches it
  void set_grad(const Tensor& g);                      // an undefined tensor clears it
  // Reverse-mode gradient of this tensor w.r.t. the leaves that require grad, accumulated into
  // their .grad(). `grad` defaults to 1 for a one-element tensor. The graph is freed unless
  // retain_graph (a second backward through a freed graph throws).
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;
  // Same storage, no history, requires_grad false.
  Tensor detach() const;

  // --- version counter of the storage (shared by all its views; see Storage::version)
  uint64_t version() const { return impl_->storage->version.load(std::memory_order_relaxed); }
  void bump_version() const { impl_->storage->version.fetch_add(1, std::memory_order_relaxed); }

  // --- in-place, not recorded by autograd (for optimizers, initializers, grads). Throw
  // std::logic_error on a tensor that requires grad while grad mode is on. Each bumps version().
  Tensor& zero_();
  Tensor& fill_(double value);
  Tensor& copy_(const Tensor& src);  // broadcasts src; converts dtype with nearest-even
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& mul_(double s);

  // "Tensor(shape=[2, 3], dtype=fp32, values=[...])" (at most `max_values` values; with 0,
  // "Tensor(shape=[2, 3], dtype=fp32)")
  std::string str(int max_values = 16) const;

 private:
  void check_dtype(DType expected) const;
  std::shared_ptr<TensorImpl> impl_;
};

inline std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  return os << t.str();
}

// Arithmetic operators, for readability (same as add/sub/mul/div/neg in ops/ops.h).
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double s);
Tensor operator-(const Tensor& a, double s);
Tensor operator*(const Tensor& a, double s);
Tensor operator/(const Tensor& a, double s);
Tensor operator+(double s, const Tensor& a);
Tensor operator-(double s, const Tensor& a);
Tensor operator*(double s, const Tensor& a);
Tensor operator-(const Tensor& a);

}  // namespace mixp
