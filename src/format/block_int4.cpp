// Blockwise absmax int4 and NF4; see include/mixp/format/block_int4.h for the rules.
#include "mixp/format/block_int4.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "format/block_common.h"

namespace mixp {
namespace {

const char* kind_name(Block4 k) {
  return k == Block4::int4 ? "int4" : "nf4";
}

// Midpoints between neighbouring NF4 codes, exact in double (two fp32 values sum exactly).
struct Nf4Midpoints {
  std::array<double, 15> m;
  Nf4Midpoints() {
    for (size_t j = 0; j < 15; ++j) {
      m[j] = (static_cast<double>(kNf4Codes[j]) + static_cast<double>(kNf4Codes[j + 1])) / 2.0;
    }
  }
};
const Nf4Midpoints& midpoints() {
  static const Nf4Midpoints mp;
  return mp;
}

void check_block(int block_size, Block4 kind) {
  if (block_size <= 0 || block_size % 2 != 0) {
    throw std::invalid_argument(std::string(kind_name(kind)) +
                                " block size must be a positive "
                                "even number (two 4-bit codes share a byte); got " +
                                std::to_string(block_size) + ", the default is 64");
  }
}

void check_round(Round r, Block4 kind) {
  if (r != Round::nearest_even && r != Round::stochastic) {
    throw std::invalid_argument(std::string(kind_name(kind)) +
                                " supports rounding nearest-even "
                                "or stochastic, not " +
                                std::string(to_string(r)));
  }
}

// Absmax of a block; returns NaN if the block holds NaN or inf.
float block_absmax(const float* x, int64_t len) {
  float a = 0.0f;
  for (int64_t k = 0; k < len; ++k) {
    const float v = std::fabs(x[k]);
    if (!(v <= std::numeric_limits<float>::max())) return std::numeric_limits<float>::quiet_NaN();
    a = std::max(a, v);
  }
  return a;
}

float block_scale(Block4 kind, float absmax) {
  return kind == Block4::int4 ? absmax / 7.0f : absmax;
}

uint32_t encode_code(Block4 kind, float x, float scale, Round round, uint32_t rbits) {
  if (scale == 0.0f) return kind == Block4::int4 ? 0u : 7u;  // all-zero block (or underflow)
  if (kind == Block4::int4) {
    const double q = std::clamp(detail::round_to_integer(x / scale, round, rbits), -8.0, 7.0);
    return static_cast<uint32_t>(static_cast<int32_t>(q)) & 0xFu;
  }
  const float n = std::clamp(x / scale, -1.0f, 1.0f);
  if (round != Round::stochastic) return nf4_nearest_code(n);
  // Between codes lo <= n <= lo+1: up with probability (n - c_lo) / (c_hi - c_lo).
  size_t lo = 0;
  while (lo < 14 && static_cast<double>(n) >= kNf4Codes[lo + 1]) ++lo;
  const double c0 = kNf4Codes[lo];
  const double c1 = kNf4Codes[lo + 1];
  const double p = (static_cast<double>(n) - c0) / (c1 - c0);
  const uint64_t frac32 = static_cast<uint64_t>(std::floor(std::clamp(p, 0.0, 1.0) * 0x1p32));
  return static_cast<uint32_t>(frac32 + rbits >= (uint64_t{1} << 32) ? lo + 1 : lo);
}

float decode_code(Block4 kind, uint32_t code, float scale) {
  return block4_code_value(kind, code) * scale;
}

bool low_first(Block4 kind) {
  return kind == Block4::int4;
}

// Visits blocks: fn(begin, len, block_index).
template <class Fn>
void for_each_block(int64_t n, int block_size, Fn&& fn) {
  for (int64_t b = 0, begin = 0; begin < n; ++b, begin += block_size) {
    fn(begin, std::min<int64_t>(block_size, n - begin), b);
  }
}

}  // namespace

uint8_t nf4_nearest_code(float n) {
  // The code is the number of midpoints strictly below n: at a midpoint the lower code wins.
  const auto& m = midpoints().m;
  uint8_t code = 0;
  while (code < 15 && static_cast<double>(n) > m[code]) ++code;
  return code;
}

float block4_code_value(Block4 kind, uint32_t code) {
  code &= 0xFu;
  if (kind == Block4::nf4) return kNf4Codes[code];
  return static_cast<float>(code >= 8 ? static_cast<int32_t>(code) - 16
                                      : static_cast<int32_t>(code));
}

int64_t block4_num_blocks(int64_t n, int block_size) {
  if (block_size <= 0) {
    throw std::invalid_argument("4-bit block size must be positive; got " +
                                std::to_string(block_size));
  }
  return (n + block_size - 1) / block_size;
}

namespace {
// n values in blocks of block_size need exactly block4_data_bytes(n) code bytes and one scale a
// block; `hint` ends the message.
void check_buffers(Block4 kind, int64_t n, int block_size, size_t data_bytes, size_t num_scales,
                   const char* hint) {
  if (static_cast<int64_t>(data_bytes) != block4_data_bytes(n) ||
      static_cast<int64_t>(num_scales) != block4_num_blocks(n, block_size)) {
    throw std::invalid_argument(
        std::string(kind_name(kind)) + " of " + std::to_string(n) + " values needs " +
        std::to_string(block4_data_bytes(n)) + " data bytes and " +
        std::to_string(block4_num_blocks(n, block_size)) + " scales; got " +
        std::to_string(data_bytes) + " and " + std::to_string(num_scales) + hint);
  }
}
}  // namespace

void block4_quantize(std::span<uint8_t> data, std::span<float> scales, std::span<const float> x,
                     Block4 kind, int block_size, Round round, uint64_t seed) {
  check_block(block_size, kind);
  check_round(round, kind);
  const auto n = static_cast<int64_t>(x.size());
  check_buffers(kind, n, block_size, data.size(), scales.size(), "");
  if (!data.empty()) data.back() = 0;  // padding nibble of an odd count stays zero
  for_each_block(n, block_size, [&](int64_t begin, int64_t len, int64_t b) {
    const float absmax = block_absmax(x.data() + begin, len);
    if (std::isnan(absmax)) {
      int64_t bad = begin;
      while (std::isfinite(x[static_cast<size_t>(bad)])) ++bad;
      throw std::invalid_argument(std::string(kind_name(kind)) + ": value " + std::to_string(bad) +
                                  " is NaN or inf, which 4-bit codes cannot store; clean the "
                                  "tensor or use an MX/fp8 format");
    }
    const float scale = block_scale(kind, absmax);
    scales[static_cast<size_t>(b)] = scale;
    for (int64_t i = begin; i < begin + len; ++i) {
      const uint32_t rb = round == Round::stochastic ? sr_bits(seed, static_cast<uint64_t>(i)) : 0;
      detail::put_nibble(data.data(), i,
                         encode_code(kind, x[static_cast<size_t>(i)], scale, round, rb),
                         low_first(kind));
    }
  });
}

void block4_dequantize(std::span<float> out, std::span<const uint8_t> data,
                       std::span<const float> scales, Block4 kind, int block_size) {
  check_block(block_size, kind);
  const auto n = static_cast<int64_t>(out.size());
  check_buffers(kind, n, block_size, data.size(), scales.size(),
                " (check the shape and block size)");
  for_each_block(n, block_size, [&](int64_t begin, int64_t len, int64_t b) {
    const float scale = scales[static_cast<size_t>(b)];
    for (int64_t i = begin; i < begin + len; ++i) {
      out[static_cast<size_t>(i)] =
          decode_code(kind, detail::get_nibble(data.data(), i, low_first(kind)), scale);
    }
  });
}

void block4_fake_quantize(std::span<float> x, Block4 kind, int block_size, Round round,
                          uint64_t seed) {
  check_block(block_size, kind);
  check_round(round, kind);
  const auto n = static_cast<int64_t>(x.size());
  for_each_block(n, block_size, [&](int64_t begin, int64_t len, int64_t) {
    const float absmax = block_absmax(x.data() + begin, len);
    if (std::isnan(absmax)) {
      std::fill_n(x.begin() + begin, len, std::numeric_limits<float>::quiet_NaN());
      return;
    }
    const float scale = block_scale(kind, absmax);
    for (int64_t i = begin; i < begin + len; ++i) {
      float& v = x[static_cast<size_t>(i)];
      const uint32_t rb = round == Round::stochastic ? sr_bits(seed, static_cast<uint64_t>(i)) : 0;
      v = decode_code(kind, encode_code(kind, v, scale, round, rb), scale);
    }
  });
}

}  // namespace mixp
