// Tensor factories. All return contiguous tensors from the caching allocator; options default to
// fp32 on the CPU without grad. Random ones take an explicit Generator (see generator.h for the
// exact, documented streams).
#pragma once
#include <cstdint>
#include <vector>

#include "mixp/tensor/generator.h"
#include "mixp/tensor/tensor.h"

namespace mixp {

Tensor empty(const Shape& shape, const TensorOptions& opts = {});
Tensor zeros(const Shape& shape, const TensorOptions& opts = {});
Tensor ones(const Shape& shape, const TensorOptions& opts = {});
Tensor full(const Shape& shape, double value, const TensorOptions& opts = {});
Tensor scalar_tensor(double value, const TensorOptions& opts = {});  // shape []
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor empty_like(const Tensor& t);

// Values are given in row-major order; their count must equal shape.numel(). They are stored
// in opts.dtype with round-to-nearest-even (integers: rounded, saturated).
Tensor from_vector(const std::vector<double>& values, const Shape& shape,
                   const TensorOptions& opts = {});
Tensor from_vector(const std::vector<float>& values, const Shape& shape,
                   const TensorOptions& opts = {});
Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape,
                   const TensorOptions& opts = {.dtype = DType::int64});
// Wraps caller-owned memory (not copied, not freed); the caller keeps it alive. `device`: where
// that memory is (a view of a device buffer's bytes as another dtype: ZeRO 3's wire buffer,
// train/trainer_zero3.cpp).
Tensor from_blob(void* data, const Shape& shape, DType dtype, Device device = Device::cpu());

// start, start+step, ... < end (like numpy.arange); default dtype fp32.
Tensor arange(double start, double end, double step = 1.0, const TensorOptions& opts = {});
Tensor arange(int64_t end, const TensorOptions& opts = {});

// Standard normal * stddev + mean.
Tensor randn(const Shape& shape, Generator& gen, const TensorOptions& opts = {});
Tensor normal(const Shape& shape, double mean, double stddev, Generator& gen,
              const TensorOptions& opts = {});
// Uniform in [0, 1) / [low, high).
Tensor rand(const Shape& shape, Generator& gen, const TensorOptions& opts = {});
Tensor uniform(const Shape& shape, double low, double high, Generator& gen,
               const TensorOptions& opts = {});
// Uniform integers in [low, high), int64 by default.
Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator& gen,
               const TensorOptions& opts = {.dtype = DType::int64});

}  // namespace mixp
