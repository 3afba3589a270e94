// The training recipes' block-scaled tensors (format/block_scaled.h: nvfp4, fp8-block) inside a
// .safetensors file, next to the storage block tensors of quantized_safetensors.h and in the same
// style (docs/fp4.md "Files and tools"). A 2-D tensor `<name>` of rows x cols becomes:
//
//   <name>          U8  [ceil(rows*cols/2)]  nvfp4: E2M1 codes, two per byte, element 2i in the
//                                            low nibble (the mxfp4 storage of block_tensor.h)
//                   U8  [rows*cols]          fp8-block: E4M3 bytes
//   <name>.scale    U8  [tile grid]          nvfp4: E4M3 block scale codes, one byte per tile
//                   F32 [tile grid]          fp8-block: the decoding scale (scale_inv) per tile
//   <name>.amax     F32 [1]                  nvfp4 only: the tensor's amax; the per-tensor decoding
//                                            scale is amax / 2688 (fp32), as TE's NVFP4Tensor keeps
//   __metadata__["mixp.<name>"] = {"scheme":"nvfp4","shape":[r,c],"tile":[16,16],
//                                  "element":"fp4_e2m1","scale_dtype":"fp8_e4m3"}
//                                 (fp8-block: "element":"fp8_e4m3","scale_dtype":"fp32",
//                                  "pow2_scales":false)
// The tile grid is ceil(rows/tile_rows) x ceil(cols/tile_cols), tiles row-major. mxfp4 (the
// recipe's ceil scale rule) needs no layout of its own: it is the MX storage of block_tensor.h
// (to_mx_block_tensor below).
#pragma once
#include <string>
#include <string_view>

#include "mixp/format/block_scaled.h"
#include "mixp/format/block_tensor.h"
#include "mixp/io/safetensors.h"

namespace mixp {

// True for the schemes stored in this layout: "nvfp4", "fp8-block".
bool is_block_scaled_file_scheme(std::string_view scheme);

// Adds `q` (nvfp4 or fp8-block; mxfp4 throws std::invalid_argument) under `name`. Throws
// SafeTensorsError if one of the names or the metadata key is taken.
void add_block_scaled_tensor(SafeTensorsFile& file, const std::string& name,
                             const BlockScaledTensor& q, bool pow2_scales,
                             std::string_view source_dtype = "");

// True when the metadata describes `name` in this layout.
bool is_block_scaled_tensor(const SafeTensorsFile& file, std::string_view name);

// Reads it back, checking everything the dequantizer relies on: the description, the companions'
// dtypes and sizes, the tile shape, scales that are finite and not negative, no NaN codes.
// Throws SafeTensorsError naming the tensor.
BlockScaledTensor get_block_scaled_tensor(const SafeTensorsFile& file, std::string_view name);

// The companion tensor names of a block-scaled tensor (".scale", ".amax").
inline constexpr std::string_view kBlockScaledCompanions[] = {".scale", ".amax"};

// An mxfp4 BlockScaledTensor as block_tensor.h's MX storage (scheme mxfp4, block 32, e8m0
// scales) of `shape` (the rows x cols it was quantized as, rows = the leading dims' product).
// dequantize_block of the result equals block_scaled_dequantize bit for bit.
BlockTensor to_mx_block_tensor(const BlockScaledTensor& q, const std::vector<int64_t>& shape);

}  // namespace mixp
