// Internal helpers shared by the block formats (block_mx, block_int8, block_int4, block_tensor):
// rounding a real number to an integer under a named Round mode, little-endian fp32 scale bytes,
// and nibble packing. Not installed; tests may include it (they see src/).
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "mixp/format/rounding.h"

namespace mixp::detail {

// Rounds v to an integer-valued double under `round`, never consulting the floating-point
// environment (std::nearbyint would follow fesetround). Stochastic rounding uses the same exact
// rule as float_codec.h: with f the fractional part of |v| and r the 32 random bits, the
// magnitude rounds up iff floor(f * 2^32) + r >= 2^32 (up with probability f, to 2^-32).
inline double round_to_integer(double v, Round round, uint32_t random_bits) {
  const double a = std::fabs(v);
  if (!(a < 0x1p52)) return v;  // already an integer (or NaN/inf: the caller handles those)
  const double fl = std::floor(a);
  const double f = a - fl;  // exact: a and fl share the binade's ulp
  double r = fl;
  switch (round) {
    case Round::nearest_even:
      if (f > 0.5 || (f == 0.5 && (static_cast<int64_t>(fl) & 1))) r = fl + 1.0;
      break;
    case Round::nearest_away:
      if (f >= 0.5) r = fl + 1.0;
      break;
    case Round::toward_zero:
      break;
    case Round::stochastic: {
      const uint64_t frac32 = static_cast<uint64_t>(std::floor(f * 0x1p32));
      if (frac32 + random_bits >= (uint64_t{1} << 32)) r = fl + 1.0;
      break;
    }
  }
  return std::signbit(v) ? -r : r;
}

// Scales travel as raw little-endian bytes in BlockTensor (the safetensors convention).
inline void store_f32_le(uint8_t* dst, float v) {
  const uint32_t u = std::bit_cast<uint32_t>(v);
  dst[0] = static_cast<uint8_t>(u);
  dst[1] = static_cast<uint8_t>(u >> 8);
  dst[2] = static_cast<uint8_t>(u >> 16);
  dst[3] = static_cast<uint8_t>(u >> 24);
}
inline float load_f32_le(const uint8_t* src) {
  const uint32_t u = uint32_t{src[0]} | (uint32_t{src[1]} << 8) | (uint32_t{src[2]} << 16) |
                     (uint32_t{src[3]} << 24);
  return std::bit_cast<float>(u);
}
inline std::vector<uint8_t> f32_to_le_bytes(std::span<const float> v) {
  std::vector<uint8_t> out(v.size() * 4);
  for (size_t i = 0; i < v.size(); ++i) store_f32_le(&out[i * 4], v[i]);
  return out;
}
inline std::vector<float> le_bytes_to_f32(std::span<const uint8_t> b) {
  std::vector<float> out(b.size() / 4);
  for (size_t i = 0; i < out.size(); ++i) out[i] = load_f32_le(&b[i * 4]);
  return out;
}

// Two 4-bit codes per byte. `low_first`: element 2i in bits 3..0 (OCP/PyTorch fp4x2, ONNX int4);
// otherwise element 2i in bits 7..4 (bitsandbytes NF4).
inline void put_nibble(uint8_t* data, int64_t i, uint32_t code, bool low_first) {
  const bool low = ((i & 1) == 0) == low_first;
  uint8_t& b = data[i >> 1];
  b = low ? static_cast<uint8_t>((b & 0xF0) | (code & 0xF))
          : static_cast<uint8_t>((b & 0x0F) | ((code & 0xF) << 4));
}
inline uint32_t get_nibble(const uint8_t* data, int64_t i, bool low_first) {
  const bool low = ((i & 1) == 0) == low_first;
  return low ? (data[i >> 1] & 0xFu) : (data[i >> 1] >> 4);
}

}  // namespace mixp::detail
