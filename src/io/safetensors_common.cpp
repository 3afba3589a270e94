// Helpers shared by the safetensors reader and writer, and the small SafeTensor/SafeTensorsFile
// members.
#include <string>
#include <utility>

#include "io/io_util.h"
#include "io/safetensors_detail.h"
#include "mixp/io/safetensors.h"

namespace mixp {

namespace io_detail {

std::string shape_string(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::optional<uint64_t> checked_nbytes(std::span<const int64_t> shape, int element_bytes) {
  uint64_t n = static_cast<uint64_t>(element_bytes);
  for (int64_t extent : shape) {
    if (extent < 0) return std::nullopt;
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(extent), &n)) return std::nullopt;
  }
  return n;
}
}  // namespace io_detail

using io_detail::quote;

int64_t SafeTensor::numel() const {
  int64_t n = 1;
  for (int64_t extent : shape) {
    if (extent < 0) {
      throw SafeTensorsError("tensor " + quote(name) + " has a negative extent in shape " +
                             io_detail::shape_string(shape));
    }
    if (__builtin_mul_overflow(n, extent, &n)) {
      throw SafeTensorsError("tensor " + quote(name) + " has too many elements: shape " +
                             io_detail::shape_string(shape));
    }
  }
  return n;
}

const SafeTensor* SafeTensorsFile::find(std::string_view name) const {
  for (const auto& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

SafeTensor* SafeTensorsFile::find(std::string_view name) {
  return const_cast<SafeTensor*>(std::as_const(*this).find(name));
}

std::string safetensors_dtype_names() {
  std::string out;
  for (const auto& t : all_dtypes()) {
    if (t.safetensors.empty()) continue;
    if (!out.empty()) out += ", ";
    out += t.safetensors;
  }
  return out;
}

}  // namespace mixp
