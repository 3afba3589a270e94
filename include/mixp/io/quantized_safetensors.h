// Block-quantized tensors (MX, int8, int4, nf4; format/block_tensor.h) inside a .safetensors file,
// so that a loader can find and decode what `mixp convert` wrote. safetensors has no dtype for
// them, so one logical tensor `<name>` becomes:
//
//   <name>             U8   [bytes]       the packed element codes (BlockTensor::data)
//   <name>.scale       U8   scale shape   e8m0 scales (MX), one byte each, or
//                      F32  scale shape   fp32 scales (int4, nf4, int8 schemes)
//   <name>.zero_point  I32  [n]           zero points (int8_affine only)
//   __metadata__["mixp.<name>"] = {"scheme":"mxfp4","shape":[4096,4096],"block":32,
//                                  "element":"fp4_e2m1","scale_dtype":"e8m0"}
//
// The scale shape is block_scale_shape() (MX: leading dims + blocks per row; int4/nf4: blocks;
// int8: [1]; int8_channel: [rows]). Readers that do not know mixp see plain U8/F32 tensors.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "mixp/format/block_tensor.h"
#include "mixp/io/safetensors.h"

namespace mixp {

// "mixp.": the metadata key prefix of a block tensor's description.
inline constexpr std::string_view kBlockMetadataPrefix = "mixp.";

// Adds `t` to `file` under `name` as above. Extra string fields in `extra` (JSON object text, or
// empty) are merged into the description (e.g. {"source_dtype":"F32"}). Throws SafeTensorsError
// if one of the three names is already taken.
void add_block_tensor(SafeTensorsFile& file, const std::string& name, const BlockTensor& t,
                      std::string_view source_dtype = "");

// True when the metadata describes `name` as a block tensor.
bool is_block_tensor(const SafeTensorsFile& file, std::string_view name);

// Reassembles the BlockTensor stored under `name`. Throws SafeTensorsError naming the tensor when
// the description or a companion tensor is missing or inconsistent.
BlockTensor get_block_tensor(const SafeTensorsFile& file, std::string_view name);

// The file's logical tensors, in file order: every tensor except the .scale/.zero_point
// companions of block tensors.
std::vector<std::string> logical_tensor_names(const SafeTensorsFile& file);

// A logical tensor's values in fp32 and its shape: floating dtypes widened exactly (F64 rounded
// to nearest even), block tensors dequantized, integer and bool tensors converted. Throws
// SafeTensorsError when there is no such tensor.
std::vector<float> read_tensor_f32(const SafeTensorsFile& file, std::string_view name,
                                   std::vector<int64_t>* shape = nullptr);

}  // namespace mixp
