// Comparing two checkpoints' weights (model.safetensors), for the data-parallel tests.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "mixp/io/safetensors.h"

namespace mixp::test {

// The largest absolute difference between two fp32 checkpoints' weights.
inline double max_weight_difference(const std::filesystem::path& a,
                                    const std::filesystem::path& b) {
  const SafeTensorsFile fa = read_safetensors(a / "model.safetensors");
  const SafeTensorsFile fb = read_safetensors(b / "model.safetensors");
  EXPECT_EQ(fa.tensors.size(), fb.tensors.size());
  double worst = 0;
  for (size_t i = 0; i < fa.tensors.size(); ++i) {
    const auto& x = fa.tensors[i];
    const auto& y = fb.tensors[i];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.dtype, DType::fp32);
    const size_t n = x.data.size() / 4;
    for (size_t k = 0; k < n; ++k) {
      float u, v;
      std::memcpy(&u, x.data.data() + 4 * k, 4);
      std::memcpy(&v, y.data.data() + 4 * k, 4);
      worst = std::max(worst, double(std::fabs(u - v)));
    }
  }
  return worst;
}

// Whether two checkpoints hold the same parameters, bit for bit (any dtype).
inline bool same_weights(const std::filesystem::path& a, const std::filesystem::path& b) {
  const SafeTensorsFile fa = read_safetensors(a / "model.safetensors");
  const SafeTensorsFile fb = read_safetensors(b / "model.safetensors");
  if (fa.tensors.size() != fb.tensors.size()) return false;
  for (size_t i = 0; i < fa.tensors.size(); ++i) {
    const auto& x = fa.tensors[i];
    const auto& y = fb.tensors[i];
    if (x.name != y.name || x.dtype != y.dtype || x.data != y.data) return false;
  }
  return true;
}

}  // namespace mixp::test
