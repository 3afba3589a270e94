#include "tensor_bytes.h"

#include "mixp/nn/serialize.h"

namespace mixp::train::detail {

// The train module's names for nn's (mixp/nn/serialize.h), kept for its many call sites.
SafeTensor to_safetensor(const std::string& name, const Tensor& t) {
  return nn::to_safetensor(name, t);
}

void copy_from_safetensor(Tensor& t, const SafeTensor& s) {
  nn::copy_from_safetensor(t, s);
}

}  // namespace mixp::train::detail
