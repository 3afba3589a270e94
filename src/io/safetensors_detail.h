// Helpers shared by safetensors_read.cpp and safetensors_write.cpp (internal; not installed).
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace mixp::io_detail {

// "[2, 3]" for error messages.
std::string shape_string(std::span<const int64_t> shape);
// numel(shape) * element_bytes, or nullopt when a product overflows uint64 (extents must be
// non-negative; the reference implementation reports the same case as ValidationOverflow).
std::optional<uint64_t> checked_nbytes(std::span<const int64_t> shape, int element_bytes);

}  // namespace mixp::io_detail
