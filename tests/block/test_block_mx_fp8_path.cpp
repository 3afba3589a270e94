// The MXFP8 quantize path (src/format/block_mx.cpp mx_quantize_fp8: chunks over the OpenMP
// threads, fp32 scaling, the SIMD converters) against the per-element definition it replaces:
// mx_shared_scale of each block, then mx_encode_element(x * 2^-scale in double) per element, with
// element i's random bits sr_bits(seed, i). Inputs are random fp32 bit patterns over every
// exponent (subnormals, huge values, inf, NaN, signed zeros), so the scaled values reach E4M3's
// and E5M2's saturation, subnormals and the fp32 underflow the comment in block_mx.cpp reasons
// about; layouts with partial blocks, several chunks and one block longer than a chunk.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <tuple>
#include <vector>

#include "mixp/format/block_mx.h"
#include "mixp/format/rounding.h"

namespace mixp {
namespace {

std::vector<float> adversarial(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    const auto r = static_cast<uint32_t>(rng());
    const auto next = [&] { return static_cast<uint32_t>(rng()); };
    switch (r % 8) {
      case 0:  // any bit pattern: every exponent, inf and NaN now and then
        x[i] = std::bit_cast<float>(next());
        break;
      case 1:  // fp32 subnormals and signed zeros
        x[i] = std::bit_cast<float>(next() & ((r >> 3) % 16 == 0 ? 0x80000000u : 0x807FFFFFu));
        break;
      case 2:  // a value 2^-40 .. 2^-10 below its block's largest (underflow in the element)
        x[i] = std::ldexp(static_cast<float>(rng() % 1000) / 999.0f - 0.5f,
                          -static_cast<int>(10 + (r >> 4) % 30));
        break;
      default:  // ordinary values around 1 with full mantissas
        x[i] = std::bit_cast<float>((next() & 0x807FFFFFu) | ((124u + (r >> 5) % 8) << 23));
    }
  }
  return x;
}

void reference(std::vector<uint8_t>& data, std::vector<uint8_t>& scales,
               const std::vector<float>& x, int64_t row_len, MxElement e, const MxOptions& o) {
  const int64_t n = static_cast<int64_t>(x.size());
  const int64_t per_row = (row_len + o.block_size - 1) / o.block_size;
  for (int64_t r = 0; r < n / row_len; ++r) {
    for (int64_t j = 0; j < per_row; ++j) {
      const int64_t begin = r * row_len + j * o.block_size;
      const int64_t len = std::min<int64_t>(o.block_size, row_len - j * o.block_size);
      const e8m0 s = mx_shared_scale(
          std::span<const float>(x.data() + begin, static_cast<size_t>(len)), e);
      scales[static_cast<size_t>(r * per_row + j)] = s.bits;
      for (int64_t i = begin; i < begin + len; ++i) {
        uint32_t code = 0;
        if (!s.is_nan()) {
          const double scaled = std::ldexp(static_cast<double>(x[static_cast<size_t>(i)]),
                                           -s.exponent());
          const uint32_t rb = o.round == Round::stochastic ? sr_bits(o.seed, uint64_t(i)) : 0;
          code = mx_encode_element(e, scaled, o.round, rb);
        }
        data[static_cast<size_t>(i)] = static_cast<uint8_t>(code);
      }
    }
  }
}

TEST(MxFp8Path, EqualsThePerElementDefinitionBitForBit) {
  for (MxElement e : {MxElement::fp8_e4m3, MxElement::fp8_e5m2}) {
    for (Round rd :
         {Round::nearest_even, Round::toward_zero, Round::stochastic, Round::nearest_away}) {
      // rows x row_len, block: one chunk, partial blocks, many chunks, a block past a chunk
      for (auto [rows, row_len, block] :
           {std::tuple{4, 96, 32}, {3, 45, 32}, {2, 40000, 32}, {5, 1000, 7}, {1, 20000, 17000}}) {
        const int64_t n = int64_t{rows} * row_len;
        const auto x = adversarial(static_cast<size_t>(n), static_cast<uint32_t>(n + block));
        MxOptions o;
        o.block_size = block;
        o.round = rd;
        o.seed = 77;
        std::vector<uint8_t> data(static_cast<size_t>(n)), want(data.size());
        std::vector<uint8_t> scales(static_cast<size_t>(mx_num_blocks(n, row_len, block)));
        std::vector<uint8_t> want_scales(scales.size());
        mx_quantize(data, scales, x, row_len, e, o);
        reference(want, want_scales, x, row_len, e, o);
        ASSERT_EQ(scales, want_scales) << mx_info(e).name;
        for (size_t i = 0; i < data.size(); ++i) {
          ASSERT_EQ(data[i], want[i]) << mx_info(e).name << " round " << static_cast<int>(rd)
                                      << " row_len " << row_len << " block " << block
                                      << " i=" << i << " x=" << x[i];
        }
      }
    }
  }
}

}  // namespace
}  // namespace mixp
