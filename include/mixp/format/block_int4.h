// 4-bit weight formats with one fp32 absmax scale per block of 64 values (QLoRA / bitsandbytes
// style blockwise quantization): symmetric int4 and NF4 (docs/formats.md "Integer quantization").
// Blocks run over the flat (row-major) element order, as bitsandbytes' quantize_4bit does; when
// the element count is not a multiple of the block size the last block is partial and its
// absmax covers only the values it holds.
//
// int4 (symmetric absmax):
//   scale = absmax / 7 (fp32), q = clamp(round(x / scale), -8, 7), value = q * scale (fp32).
//   Since |x| <= absmax, q lands in [-7, 7]; -8 is never produced but decodes as -8 * scale.
//   An all-zero block has scale 0 and decodes to zeros. The division is exact-rounded fp32
//   (x / scale, not x * (1/scale)).
//   Packing: two's complement nibbles, element 2i in the LOW nibble (ONNX INT4 and PyTorch's
//   quint4x2 put the first element in the low bits).
// NF4 (QLoRA, Dettmers et al. 2023, appendix E; bitsandbytes' NF4 table):
//   scale = absmax (fp32); n = x / absmax (fp32); code = index of the nearest of the 16 values
//   in kNf4Codes, ties (n exactly halfway between two codes) to the LOWER code, as
//   bitsandbytes' dQuantizeNF4 decision tree (strict `>` against the midpoints) does. The
//   midpoints are compared exactly (in double), not as rounded fp32 thresholds.
//   value = kNf4Codes[code] * absmax (fp32). An all-zero block decodes to zeros (code 7 = 0.0).
//   Packing: element 2i in the HIGH nibble (bitsandbytes: packed = q[2i] << 4 | q[2i+1]).
// Rounding: Round::nearest_even (the rules above) or Round::stochastic, which rounds up to the
// next code (int4: next integer) with probability equal to the position between the two
// neighbours, from sr_bits(seed, i); other modes throw std::invalid_argument.
// NaN/inf: quantize throws (4-bit codes cannot hold them); fake quantization turns a block that
// holds any NaN/inf into NaN (like an MX block) so NaN guards still see it.
// Scales are held as fp32 here; BlockTensor stores them as little-endian bytes.
#pragma once
#include <array>
#include <cstdint>
#include <span>

#include "mixp/format/rounding.h"

namespace mixp {

inline constexpr int kInt4DefaultBlock = 64;

// The NF4 code book, exactly as QLoRA/bitsandbytes (each value is an fp32 number).
inline constexpr std::array<float, 16> kNf4Codes = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982933044434f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f,
};

// Nearest NF4 code for a normalized value in [-1, 1] (values outside clamp to codes 0 / 15).
uint8_t nf4_nearest_code(float n);

enum class Block4 : uint8_t { int4, nf4 };

int64_t block4_num_blocks(int64_t n, int block_size);
inline int64_t block4_data_bytes(int64_t n) {
  return (n + 1) / 2;
}

// `data`: block4_data_bytes(n) bytes, `scales`: block4_num_blocks(n, block_size) fp32.
void block4_quantize(std::span<uint8_t> data, std::span<float> scales, std::span<const float> x,
                     Block4 kind, int block_size, Round round, uint64_t seed);
void block4_dequantize(std::span<float> out, std::span<const uint8_t> data,
                       std::span<const float> scales, Block4 kind, int block_size);
// Quantize + dequantize in place, identical to the two calls above for finite input.
void block4_fake_quantize(std::span<float> x, Block4 kind, int block_size, Round round,
                          uint64_t seed);

// Value of one stored code (before the block scale): int4 two's complement or NF4 table entry.
float block4_code_value(Block4 kind, uint32_t code);

}  // namespace mixp
