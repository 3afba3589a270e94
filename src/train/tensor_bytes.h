// Small helpers for safetensors entries in the train module (tensor <-> entry conversion itself
// is nn's: mixp/nn/serialize.h).
#pragma once
#include <cstdint>
#include <vector>

#include "mixp/nn/serialize.h"
#include "mixp/tensor/shape.h"

namespace mixp::train::detail {

inline std::vector<int64_t> dims(const Shape& s) {
  return {s.begin(), s.end()};
}

}  // namespace mixp::train::detail
