// NaN/inf guard for input buffers. Inputs that are already non-finite make every later NaN report
// (loss scaling, overflow diagnosis) point at the wrong place, so data is checked where it enters.
#pragma once
#include <cstdint>
#include <span>
#include <string_view>

namespace mixp::data {

// Index of the first NaN or infinity in `values`, or -1 when all are finite.
int64_t find_nonfinite(std::span<const float> values);
int64_t find_nonfinite(std::span<const double> values);

// Throws DataError "<what>: NaN at index I (of N) ..." for the first non-finite value.
void check_finite(std::span<const float> values, std::string_view what);
void check_finite(std::span<const double> values, std::string_view what);

}  // namespace mixp::data
