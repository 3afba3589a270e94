// Packing of low-bit weight codes; the layouts are in include/mixp/quant/lowbit_model.h.
#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include "mixp/quant/lowbit_model.h"

namespace mixp::quant {

int64_t packed_row_bytes(int64_t K, LowBitScheme s) {
  switch (s) {
    case LowBitScheme::int8:
      return K;
    case LowBitScheme::int4:
      return (K + 1) / 2;
    case LowBitScheme::int2:
      return (K + 3) / 4;
    case LowBitScheme::ternary:
    case LowBitScheme::binary:
    case LowBitScheme::binary_act:
      return (K + 7) / 8;
  }
  return K;
}

std::vector<uint8_t> pack_weight_codes(const float* codes, int64_t O, int64_t K, LowBitScheme s) {
  const int64_t rb = packed_row_bytes(K, s);
  const bool tern = s == LowBitScheme::ternary;
  std::vector<uint8_t> out(static_cast<size_t>((tern ? 2 : 1) * O * rb), 0);
  const int32_t qmin = weight_qmin(s), qmax = weight_qmax(s);
  for (int64_t o = 0; o < O; ++o) {
    uint8_t* row = out.data() + o * rb;
    for (int64_t k = 0; k < K; ++k) {
      const float v = codes[o * K + k];
      const bool binary = s == LowBitScheme::binary || s == LowBitScheme::binary_act;
      if (!(v >= static_cast<float>(qmin) && v <= static_cast<float>(qmax)) ||
          v != std::nearbyint(v) || (binary && v == 0.0f)) {
        throw std::invalid_argument(fmt::format(
            "mixp::quant::pack_weight_codes: code {} at [{}, {}] is not a {} code", v, o, k,
            name(s)));
      }
      const int32_t c = static_cast<int32_t>(v);
      switch (s) {
        case LowBitScheme::int8:
          row[k] = static_cast<uint8_t>(static_cast<int8_t>(c));
          break;
        case LowBitScheme::int4:
          row[k / 2] |= static_cast<uint8_t>((c & 0xF) << (4 * (k % 2)));
          break;
        case LowBitScheme::int2:
          row[k / 4] |= static_cast<uint8_t>((c & 0x3) << (2 * (k % 4)));
          break;
        case LowBitScheme::ternary:
          if (c != 0) row[k / 8] |= static_cast<uint8_t>(1u << (k % 8));
          if (c < 0) row[O * rb + k / 8] |= static_cast<uint8_t>(1u << (k % 8));
          break;
        case LowBitScheme::binary:
        case LowBitScheme::binary_act:
          if (c < 0) row[k / 8] |= static_cast<uint8_t>(1u << (k % 8));
          break;
      }
    }
  }
  return out;
}

std::vector<int8_t> unpack_weight_codes(const uint8_t* packed, int64_t O, int64_t K,
                                        LowBitScheme s) {
  const int64_t rb = packed_row_bytes(K, s);
  std::vector<int8_t> out(static_cast<size_t>(O * K));
  if (s == LowBitScheme::int4 || s == LowBitScheme::int2) {
    for (int64_t o = 0; o < O; ++o) {
      (s == LowBitScheme::int4 ? unpack_int4_to_int8 : unpack_int2_to_int8)(
          out.data() + o * K, packed + o * rb, K);
    }
    return out;
  }
  for (int64_t o = 0; o < O; ++o) {
    const uint8_t* row = packed + o * rb;
    int8_t* d = out.data() + o * K;
    for (int64_t k = 0; k < K; ++k) {
      switch (s) {
        case LowBitScheme::int8:
          d[k] = static_cast<int8_t>(row[k]);
          break;
        case LowBitScheme::int4: {
          const int v = (row[k / 2] >> (4 * (k % 2))) & 0xF;
          d[k] = static_cast<int8_t>(v >= 8 ? v - 16 : v);
          break;
        }
        case LowBitScheme::int2: {
          const int v = (row[k / 4] >> (2 * (k % 4))) & 0x3;
          d[k] = static_cast<int8_t>(v >= 2 ? v - 4 : v);
          break;
        }
        case LowBitScheme::ternary: {
          const bool nz = (row[k / 8] >> (k % 8)) & 1;
          const bool neg = (row[O * rb + k / 8] >> (k % 8)) & 1;
          d[k] = static_cast<int8_t>(nz ? (neg ? -1 : 1) : 0);
          break;
        }
        case LowBitScheme::binary:
        case LowBitScheme::binary_act:
          d[k] = static_cast<int8_t>(((row[k / 8] >> (k % 8)) & 1) ? -1 : 1);
          break;
      }
    }
  }
  return out;
}

}  // namespace mixp::quant
