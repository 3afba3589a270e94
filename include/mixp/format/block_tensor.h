// Name-driven entry point over every block/quantized format, for `mixp convert` and anything
// else that picks a scheme by name. The per-family headers (block_mx.h, block_int8.h,
// block_int4.h) document the arithmetic; this file fixes the storage contract.
//
// scheme        element   scale  scales (one per ...)                       block_size
// mxfp8_e4m3    fp8_e4m3  e8m0   block of 32 along the last dim            32 (default)
// mxfp8_e5m2    fp8_e5m2  e8m0   "                                          32
// mxfp6_e2m3    fp6_e2m3  e8m0   "   (one code per byte, low 6 bits)         32
// mxfp6_e3m2    fp6_e3m2  e8m0   "                                          32
// mxfp4         fp4_e2m1  e8m0   "   (2 per byte, element 2i low nibble)     32 (even)
// mxint8        int8      e8m0   "   (q * 2^-6)                              32
// int4          int4      fp32   block of 64 over the flat order (2i low)    64 (even)
// nf4           nf4       fp32   block of 64 over the flat order (2i HIGH)   64 (even)
// int8          int8      fp32   tensor (symmetric qint8, zero point 0)      0 (none)
// int8_affine   int8      fp32   tensor (affine qint8), zero_points = {zp}   0
// int8_channel  int8      fp32   channel along axis 0 (symmetric qint8)      0
//
// BlockSpec.block_size: 0 picks the scheme's default (32 for MX, 64 for int4/nf4); negative
// values, and odd values for the 4-bit schemes, throw. The int8 schemes have no blocks and
// ignore it (the result's block_size is 0).
// BlockSpec.round: MX accepts every mode; int8 every mode (PyTorch uses nearest_even); int4/nf4
// nearest_even or stochastic. seed feeds stochastic rounding: element i uses sr_bits(seed, i).
// Scales are raw little-endian bytes: 1 per e8m0 scale, 4 per fp32 scale.
// Shapes: any rank; a rank-0 shape ({}) is one value. MX blocks never span rows of the last
// dimension; int4/nf4 blocks run over the flattened tensor (bitsandbytes' layout).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mixp/format/dtype.h"
#include "mixp/format/rounding.h"

namespace mixp {

struct BlockSpec {
  std::string scheme;
  int block_size = 0;  // 0: the scheme's default
  Round round = Round::nearest_even;
  uint64_t seed = 0;
};

struct BlockTensor {
  std::string scheme;
  std::vector<int64_t> shape;
  int block_size = 0;                // elements per scale; 0 for the int8 schemes
  DType element = DType::int8;       // e.g. fp4_e2m1, int8, nf4
  std::vector<uint8_t> data;         // packed element bits
  DType scale_dtype = DType::fp32;   // e8m0 or fp32
  std::vector<uint8_t> scales;       // raw little-endian scale bytes (one per block/channel/tensor)
  std::vector<int32_t> zero_points;  // int8_affine only
};

bool is_block_scheme(std::string_view name);
// All scheme names, in the table's order.
std::vector<std::string> block_scheme_names();
// The default block size of a scheme (0 for the int8 ones); throws for an unknown scheme.
int default_block_size(std::string_view scheme);

// Quantizes x (row-major, `shape`'s element count) by spec. Throws std::invalid_argument for an
// unknown scheme (the message lists the known ones), a bad block size or rounding mode, a shape
// that does not match x, and NaN/inf input to the integer schemes (they cannot store them).
BlockTensor quantize_block(std::span<const float> x, const std::vector<int64_t>& shape,
                           const BlockSpec& spec);
// Decodes to fp32; `out` must hold the shape's element count. Throws std::invalid_argument when
// the tensor is inconsistent (data/scales sizes, dtype, block size), e.g. when read from a file.
void dequantize_block(const BlockTensor& t, std::span<float> out);
// quantize_block + dequantize_block in place, without building the BlockTensor (training's fake
// quantization and `mixp formats` use it). int schemes turn NaN/inf blocks into NaN instead of
// throwing (int8 per tensor: NaN stays NaN, inf saturates).
void fake_quantize_block(std::span<float> x, const std::vector<int64_t>& shape,
                         const BlockSpec& spec);

// Element count of a shape (1 for rank 0); throws on a negative dimension.
int64_t shape_numel(std::span<const int64_t> shape);
// Shape of the scale tensor: MX {dims[:-1]..., ceil(K / block)} ({1} for rank 0);
// int4/nf4 {ceil(n / block)}; int8 and int8_affine {1}; int8_channel {shape[0]}.
std::vector<int64_t> block_scale_shape(const BlockTensor& t);

}  // namespace mixp
