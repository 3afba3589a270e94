// Tensors to and from safetensors entries (internal to the train module).
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "mixp/io/safetensors.h"
#include "mixp/tensor/tensor.h"

namespace mixp::train::detail {

inline std::vector<int64_t> dims(const Shape& s) {
  return {s.begin(), s.end()};
}

// A contiguous copy of `t`'s elements, in its own dtype.
SafeTensor to_safetensor(const std::string& name, const Tensor& t);
// Copies `s` into `t` (same shape, checked by the caller). The same dtype is copied byte for byte
// (bit-exact resume); another floating dtype is converted with nearest-even.
void copy_from_safetensor(Tensor& t, const SafeTensor& s);
// Refuses (TrainError naming `source` and the tensor) a stored tensor that cannot hold `t`'s
// values: a floating `t` from an integer or bool tensor or the reverse, or a NaN or infinity in a
// floating tensor ("... the checkpoint is damaged, not the learning rate"). `what` names the kind
// ("tensor", "optimizer state").
void check_loaded_tensor(const Tensor& t, const SafeTensor& s, std::string_view source,
                         std::string_view what);

}  // namespace mixp::train::detail
