// What the two block layouts of .safetensors files share (src/io/quantized_safetensors.cpp: the
// MX/int/nf4 block tensors; src/io/block_scaled_safetensors.cpp: nvfp4 and fp8-block): the
// metadata key that describes a tensor, and a vector's bytes as a tensor's data.
#pragma once
#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "mixp/io/quantized_safetensors.h"

namespace mixp::detail {

// "mixp.<name>": where a block tensor's description sits in __metadata__.
inline std::string block_metadata_key(std::string_view name) {
  return std::string(kBlockMetadataPrefix) + std::string(name);
}

template <class Bytes>
std::vector<std::byte> to_bytes(const Bytes& v) {
  std::vector<std::byte> out(v.size() * sizeof(typename Bytes::value_type));
  if (!out.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

}  // namespace mixp::detail
