#include "mixp/tensor/tensor.h"

#include <fmt/format.h>

#include <atomic>
#include <cstring>
#include <stdexcept>

#include "mixp/tensor/allocator.h"
#include "mixp/tensor/element.h"
#include "tensor/backward_hook.h"
#include "tensor/release_hook.h"

namespace mixp {

namespace {
// The allocator of a device's memory: the guarded device is host memory, from the host's pool;
// cuda memory comes from the allocator its backend registered (allocator.h, DeviceMemoryHooks).
const DeviceMemoryHooks& device_hooks(Device dev) {
  const DeviceMemoryHooks* h = device_memory(dev.kind);
  if (!h) {
    throw std::invalid_argument(
        "mixp: no backend for device " + dev.str() +
        " is built into this mixp (configure with -DMIXP_CUDA=ON on a machine with the CUDA "
        "toolkit, docs/cuda.md); allocate tensors on the cpu");
  }
  return *h;
}
}  // namespace

CachingAllocator& allocator_for(Device dev) {
  if (!dev.is_host_memory()) return device_hooks(dev).allocator(dev.index);
  return CachingAllocator::cpu();
}
AllocatorStats allocator_stats(Device dev) {
  return allocator_for(dev).stats();
}
void reset_peak_memory(Device dev) {
  allocator_for(dev).reset_peak();
}

Storage::Storage(size_t n, Device dev)
    : nbytes(n), device(dev), allocator(&allocator_for(dev)), owned(true) {
  const auto b = allocator->allocate(n);
  data = b.ptr;
  block_size = b.size;
}

Storage::Storage(void* external, size_t n, Device dev)
    : data(external), nbytes(n), device(dev), owned(false) {}

Storage::~Storage() {
  if (owned && data) allocator->deallocate({data, block_size}, nbytes);
}

Tensor Tensor::empty(const Shape& shape, const TensorOptions& opts) {
  for (int64_t d : shape) {
    if (d < 0)
      throw std::invalid_argument("mixp::empty: negative dimension in shape " + shape.str());
  }
  auto impl = std::make_shared<TensorImpl>();
  const size_t bytes =
      static_cast<size_t>(shape.numel()) * static_cast<size_t>(traits(opts.dtype).storage_bytes);
  impl->storage = std::make_shared<Storage>(bytes, opts.device);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = opts.dtype;
  impl->device = opts.device;
  impl->requires_grad = opts.requires_grad;
  if (opts.requires_grad && !traits(opts.dtype).is_float()) {
    throw std::invalid_argument("mixp: only floating-point tensors can require grad (dtype " +
                                std::string(name(opts.dtype)) + ")");
  }
  return Tensor(std::move(impl));
}

int64_t Tensor::size(int64_t d) const {
  return impl_->shape[wrap_dim(d, dim(), "size")];
}
int64_t Tensor::stride(int64_t d) const {
  return impl_->strides[wrap_dim(d, dim(), "stride")];
}
size_t Tensor::element_size() const {
  return static_cast<size_t>(traits(dtype()).storage_bytes);
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int i = dim() - 1; i >= 0; --i) {
    if (impl_->shape[i] == 1) continue;
    if (impl_->strides[i] != expected) return false;
    expected *= impl_->shape[i];
  }
  return true;
}

void* Tensor::data_ptr(std::source_location caller) const {
  if (!impl_) throw std::logic_error("mixp: data_ptr() of an undefined tensor");
  if (impl_->device.kind != DeviceKind::cpu && !device_access_open()) [[unlikely]] {
    if (impl_->device.kind == DeviceKind::cuda) {
      // Device memory: the host would crash reading it. What reaches here is host code that has
      // no cuda kernel yet (docs/architecture.md 9 "The proof"; docs/cuda.md).
      throw std::runtime_error(fmt::format(
          "mixp: {}:{} ({}) reads a tensor on {} directly; this step is not implemented on cuda "
          "yet (docs/cuda.md); run it on the cpu device",
          caller.file_name(), caller.line(), caller.function_name(), impl_->device.str()));
    }
    throw std::logic_error(fmt::format(
        "mixp: {}:{} ({}) reads the data pointer of a tensor on the guarded device outside a "
        "backend call; compute through a backend op, or copy to the host with to(Device::cpu())",
        caller.file_name(), caller.line(), caller.function_name()));
  }
  return static_cast<char*>(impl_->storage->data) +
         impl_->offset * static_cast<int64_t>(element_size());
}

void Tensor::check_dtype(DType expected) const {
  if (!impl_) throw std::logic_error("mixp: data() of an undefined tensor");
  if (dtype() != expected) {
    throw std::invalid_argument(
        fmt::format("mixp: data<{}>() on a tensor of dtype {}", name(expected), name(dtype())));
  }
}

namespace {
int64_t element_offset(const Tensor& t, std::initializer_list<int64_t> index) {
  if (static_cast<int>(index.size()) != t.dim()) {
    throw std::invalid_argument(fmt::format("mixp: index of {} dims for a tensor of shape {}",
                                            index.size(), t.shape().str()));
  }
  int64_t off = 0;
  int d = 0;
  for (int64_t i : index) {
    const int64_t n = t.shape()[d];
    if (i < -n || i >= n) {
      throw std::out_of_range(
          fmt::format("mixp: index {} out of range for dim {} of shape {}", i, d, t.shape().str()));
    }
    off += (i < 0 ? i + n : i) * t.strides()[d];
    ++d;
  }
  return off;
}

// f(k, offset) for the k-th element of t in row-major order and its offset in the storage (in
// elements, from t's first element).
template <class F>
void for_each_offset(const Tensor& t, F&& f) {
  const int n = t.dim();
  const int64_t total = t.numel();
  Shape idx = Shape::filled(n, 0);
  int64_t off = 0;
  for (int64_t k = 0; k < total; ++k) {
    f(k, off);
    for (int d = n - 1; d >= 0; --d) {
      if (++idx[d] < t.shape()[d]) {
        off += t.strides()[d];
        break;
      }
      off -= (t.shape()[d] - 1) * t.strides()[d];
      idx[d] = 0;
    }
  }
}
}  // namespace

double Tensor::item() const {
  if (numel() != 1) {
    throw std::invalid_argument("mixp: item() needs a tensor with one element, got shape " +
                                shape().str());
  }
  if (!device().is_host_memory()) return to(Device::cpu()).item();
  const DeviceAccessScope host_read;  // an explicit host read (device.h)
  return load_element(data_ptr(), dtype(), 0);
}

double Tensor::at(std::initializer_list<int64_t> index) const {
  if (!device().is_host_memory()) return to(Device::cpu()).at(index);
  const DeviceAccessScope host_read;
  return load_element(data_ptr(), dtype(), element_offset(*this, index));
}

void Tensor::set_at(std::initializer_list<int64_t> index, double v) {
  if (!device().is_host_memory()) {
    throw std::invalid_argument("mixp: set_at on a tensor on " + device().str() +
                                " (device memory); build the values on the cpu and copy them with "
                                "to(Device), or use fill_/copy_");
  }
  const DeviceAccessScope host_write;
  store_element(data_ptr(), dtype(), element_offset(*this, index), v, Round::nearest_even,
                Overflow::saturate, 0);
  bump_version();
}

std::vector<double> Tensor::to_double_vector() const {
  if (!device().is_host_memory()) return to(Device::cpu()).to_double_vector();
  std::vector<double> out;
  out.reserve(static_cast<size_t>(numel()));
  const DeviceAccessScope host_read;
  const void* base = data_ptr();
  for_each_offset(*this,
                  [&](int64_t, int64_t off) { out.push_back(load_element(base, dtype(), off)); });
  return out;
}

Tensor Tensor::to(Device device) const {
  if (!impl_) throw std::logic_error("mixp: to(Device) of an undefined tensor");
  if (this->device() == device) return *this;
  if (!this->device().is_host_memory() || !device.is_host_memory()) {
    // Device memory: one contiguous copy through the device's hooks. A strided view is made
    // contiguous on its own device first (a backend copy); host memory of any kind goes through
    // a contiguous host buffer.
    const Device far = this->device().is_host_memory() ? device : this->device();
    const DeviceMemoryHooks& hooks = device_hooks(far);
    const Tensor src = this->device().kind == DeviceKind::cuda
                           ? contiguous()
                           : (is_contiguous() ? *this : to(Device::cpu()).contiguous());
    Tensor out = Tensor::empty(shape(), {.dtype = dtype(), .device = device});
    const DeviceAccessScope transfer;
    hooks.copy(out.data_ptr(), out.device().is_host_memory() ? Device::cpu() : out.device(),
               src.data_ptr(), src.device().is_host_memory() ? Device::cpu() : src.device(),
               nbytes());
    return out;
  }
  // Both devices are host memory: a row-major copy under an open access scope.
  Tensor out = Tensor::empty(shape(), {.dtype = dtype(), .device = device});
  const DeviceAccessScope transfer;
  if (is_contiguous()) {
    std::memcpy(out.data_ptr(), data_ptr(), nbytes());
    return out;
  }
  const auto es = static_cast<int64_t>(element_size());
  const char* src = static_cast<const char*>(data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  for_each_offset(*this, [&](int64_t k, int64_t off) {
    std::memcpy(dst + k * es, src + off * es, static_cast<size_t>(es));
  });
  return out;
}

Tensor& Tensor::requires_grad_(bool on) {
  if (!is_leaf()) {
    throw std::logic_error(
        "mixp: requires_grad_ can only be changed on leaf tensors (use detach() first)");
  }
  if (on && !is_floating_point()) {
    throw std::invalid_argument("mixp: only floating-point tensors can require grad (dtype " +
                                std::string(name(dtype())) + ")");
  }
  impl_->requires_grad = on;
  return *this;
}

void Tensor::set_grad(const Tensor& g) {
  if (g.defined() && g.shape() != shape()) {
    throw std::invalid_argument("mixp: set_grad: gradient shape " + g.shape().str() +
                                " differs from tensor shape " + shape().str());
  }
  impl_->grad = g.impl_ptr();
}

namespace {
// Constant-initialized, so it is set before any dynamic initializer could call backward().
std::atomic<detail::BackwardRunner> g_backward_runner{nullptr};
std::atomic<detail::ImplReleaseHook> g_release_hook{nullptr};
}  // namespace

void detail::set_impl_release_hook(ImplReleaseHook hook) {
  g_release_hook.store(hook);
}

void TensorImpl::released() {
  if (const detail::ImplReleaseHook hook = g_release_hook.load()) hook(this);
}

void detail::set_backward_runner(BackwardRunner run) {
  g_backward_runner.store(run);
}

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  const detail::BackwardRunner run = g_backward_runner.load();
  if (!run) throw std::logic_error("mixp: Tensor::backward: no autograd engine is registered");
  const Tensor roots[1] = {*this};
  const Tensor grads[1] = {grad};
  run(std::span<const Tensor>(roots, 1), std::span<const Tensor>(grads, 1), retain_graph);
}

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->offset = impl_->offset;
  impl->shape = impl_->shape;
  impl->strides = impl_->strides;
  impl->dtype = impl_->dtype;
  impl->device = impl_->device;
  return Tensor(std::move(impl));
}

std::string Tensor::str(int max_values) const {
  if (!defined()) return "Tensor(undefined)";
  std::string s = fmt::format("Tensor(shape={}, dtype={}", shape().str(), name(dtype()));
  if (requires_grad()) s += ", requires_grad";
  if (max_values <= 0) return s + ")";  // no values asked for: shape and dtype only
  s += ", values=[";
  const std::vector<double> v = to_double_vector();
  for (size_t i = 0; i < v.size() && static_cast<int>(i) < max_values; ++i) {
    if (i) s += ", ";
    s += fmt::format("{:.6g}", v[i]);
  }
  if (static_cast<int64_t>(v.size()) > max_values) s += ", ...";
  return s + "])";
}

}  // namespace mixp
