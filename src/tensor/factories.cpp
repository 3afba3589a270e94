#include "mixp/tensor/factories.h"

#include <cmath>
#include <numbers>
#include <stdexcept>

#include "mixp/tensor/element.h"

namespace mixp {

double Generator::normal() {
  const double u1 = 1.0 - uniform01();  // (0, 1]: log is finite
  const double u2 = uniform01();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

namespace {
// Fills a fresh contiguous tensor from a per-element function of the row-major index.
// Values are made on the host; a tensor for another device is made on the cpu and copied there
// (the host-access path of tensor.h).
template <class F>
Tensor generate(const Shape& shape, const TensorOptions& opts, F&& f) {
  if (!opts.device.is_cpu()) {
    TensorOptions host = opts;
    host.device = Device::cpu();
    host.requires_grad = false;
    Tensor t = generate(shape, host, f).to(opts.device);
    if (opts.requires_grad) t.requires_grad_(true);
    return t;
  }
  TensorOptions o = opts;
  o.requires_grad = false;
  Tensor t = Tensor::empty(shape, o);
  const int64_t n = t.numel();
  void* p = t.data_ptr();
  if (opts.dtype == DType::fp32) {
    float* q = static_cast<float*>(p);
    for (int64_t i = 0; i < n; ++i) q[i] = static_cast<float>(f(i));
  } else if (opts.dtype == DType::fp64) {
    double* q = static_cast<double*>(p);
    for (int64_t i = 0; i < n; ++i) q[i] = f(i);
  } else {
    for (int64_t i = 0; i < n; ++i)
      store_element(p, opts.dtype, i, f(i), Round::nearest_even, Overflow::saturate, 0);
  }
  if (opts.requires_grad) t.requires_grad_(true);
  return t;
}
}  // namespace

Tensor empty(const Shape& shape, const TensorOptions& opts) {
  return Tensor::empty(shape, opts);
}

Tensor zeros(const Shape& shape, const TensorOptions& opts) {
  return full(shape, 0.0, opts);
}
Tensor ones(const Shape& shape, const TensorOptions& opts) {
  return full(shape, 1.0, opts);
}
Tensor scalar_tensor(double value, const TensorOptions& opts) {
  return full(Shape{}, value, opts);
}
Tensor zeros_like(const Tensor& t) {
  return zeros(t.shape(), {.dtype = t.dtype(), .device = t.device()});
}
Tensor ones_like(const Tensor& t) {
  return ones(t.shape(), {.dtype = t.dtype(), .device = t.device()});
}
Tensor empty_like(const Tensor& t) {
  return empty(t.shape(), {.dtype = t.dtype(), .device = t.device()});
}

namespace {
template <class V>
Tensor from_values(const std::vector<V>& values, const Shape& shape, const TensorOptions& opts) {
  if (static_cast<int64_t>(values.size()) != shape.numel()) {
    throw std::invalid_argument("mixp::from_vector: " + std::to_string(values.size()) +
                                " values for shape " + shape.str() + " (" +
                                std::to_string(shape.numel()) + " elements)");
  }
  return generate(shape, opts,
                  [&](int64_t i) { return static_cast<double>(values[static_cast<size_t>(i)]); });
}
}  // namespace

Tensor from_vector(const std::vector<double>& values, const Shape& shape,
                   const TensorOptions& opts) {
  return from_values(values, shape, opts);
}
Tensor from_vector(const std::vector<float>& values, const Shape& shape,
                   const TensorOptions& opts) {
  return from_values(values, shape, opts);
}
Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape,
                   const TensorOptions& opts) {
  if (opts.dtype == DType::int64) {
    if (static_cast<int64_t>(values.size()) != shape.numel())
      return from_values(values, shape, opts);  // throws
    TensorOptions host = opts;
    host.device = Device::cpu();
    Tensor t = Tensor::empty(shape, host);
    std::copy(values.begin(), values.end(), t.data<int64_t>());
    return t.to(opts.device);
  }
  return from_values(values, shape, opts);
}

Tensor from_blob(void* data, const Shape& shape, DType dtype, Device device) {
  auto impl = std::make_shared<TensorImpl>();
  const size_t bytes =
      static_cast<size_t>(shape.numel()) * static_cast<size_t>(traits(dtype).storage_bytes);
  impl->storage = std::make_shared<Storage>(data, bytes, device);
  impl->device = device;
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor arange(double start, double end, double step, const TensorOptions& opts) {
  if (step == 0) throw std::invalid_argument("mixp::arange: step must be non-zero");
  const double n = std::ceil((end - start) / step);
  const int64_t count = n > 0 ? static_cast<int64_t>(n) : 0;
  return generate(Shape{count}, opts,
                  [&](int64_t i) { return start + static_cast<double>(i) * step; });
}
Tensor arange(int64_t end, const TensorOptions& opts) {
  return arange(0.0, static_cast<double>(end), 1.0, opts);
}

Tensor randn(const Shape& shape, Generator& gen, const TensorOptions& opts) {
  return normal(shape, 0.0, 1.0, gen, opts);
}
Tensor normal(const Shape& shape, double mean, double stddev, Generator& gen,
              const TensorOptions& opts) {
  return generate(shape, opts, [&](int64_t) { return mean + stddev * gen.normal(); });
}
Tensor rand(const Shape& shape, Generator& gen, const TensorOptions& opts) {
  return uniform(shape, 0.0, 1.0, gen, opts);
}
Tensor uniform(const Shape& shape, double low, double high, Generator& gen,
               const TensorOptions& opts) {
  return generate(shape, opts, [&](int64_t) { return low + (high - low) * gen.uniform01(); });
}
Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator& gen,
               const TensorOptions& opts) {
  if (high <= low) throw std::invalid_argument("mixp::randint: high must be greater than low");
  const uint64_t range = static_cast<uint64_t>(high - low);
  return generate(shape, opts, [&](int64_t) {
    return static_cast<double>(low + static_cast<int64_t>(gen.next_u64() % range));
  });
}

}  // namespace mixp
