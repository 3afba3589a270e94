// Safetensors entries in the train module: shapes as vectors, and the checks a loaded tensor must
// pass (the conversion itself is nn's: mixp/nn/serialize.h).
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "mixp/nn/serialize.h"
#include "mixp/tensor/tensor.h"

namespace mixp::train::detail {

inline std::vector<int64_t> dims(const Shape& s) {
  return {s.begin(), s.end()};
}

// Refuses (TrainError naming `source` and the tensor) a stored tensor that cannot hold `t`'s
// values: a floating `t` from an integer or bool tensor or the reverse, or a NaN or infinity in a
// floating tensor ("... the checkpoint is damaged, not the learning rate"). `what` names the kind
// ("tensor", "optimizer state").
void check_loaded_tensor(const Tensor& t, const SafeTensor& s, std::string_view source,
                         std::string_view what);

}  // namespace mixp::train::detail
