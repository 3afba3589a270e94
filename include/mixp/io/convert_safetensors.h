// Re-encoding every floating tensor of a .safetensors file into one format: what `mixp convert`
// does, for library users too (quantizing a checkpoint for inference, casting it to bf16).
//
// Targets:
//  - element formats fp64, fp32, tf32, bf16, fp16, fp8_e4m3, fp8_e5m2 are written as the
//    safetensors dtypes F64, F32, F32 (tf32: fp32 values on the tf32 grid), BF16, F16, F8_E4M3,
//    F8_E5M2, rounded with `round` and overflowing per `overflow`;
//  - block schemes (block_scheme_names(): mxfp8_e4m3 ... nf4, int8, int8_affine, int8_channel),
//    and the MX element names fp6_e2m3, fp6_e3m2, fp4_e2m1 meaning their MX scheme, are written as
//    described in quantized_safetensors.h. MX elements always saturate (OCP MX);
//  - the training recipes' block-scaled formats nvfp4 and fp8-block (format/block_scaled.h),
//    written as described in block_scaled_safetensors.h. They quantize 2-D tensors only, as
//    rows x cols with cols the reduction dimension (a Linear weight [out, in]); tensors of any
//    other rank (biases, norms) are kept as they are, a block tensor of another rank is decoded
//    to F32. mxfp4 with scale_mode "ceil" is the mxfp4 recipe's quantizer (TE's power-of-two
//    rule, block_scaled.h) stored as the MX storage format: it takes every floating tensor as
//    leading dims x last dim, like the default "floor" (OCP MX, block_mx.h).
// Sources: F64, F32, BF16, F16, F8_E4M3, F8_E5M2 and block tensors of an earlier conversion
// (decoded first). Integer and bool tensors pass through unchanged. F64 sources are rounded
// straight from double to element targets (no double rounding); block targets take fp32, so
// F64 is first rounded to fp32 for them. Other metadata entries are kept.
// Stochastic rounding: tensor k of the file uses the seed mix(seed, k), so tensors do not share
// random streams and the result depends only on (seed, file).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mixp/format/dtype.h"
#include "mixp/format/rounding.h"
#include "mixp/io/safetensors.h"

namespace mixp {

struct ConvertTarget {
  std::string name;           // canonical: the dtype name ("bf16") or the scheme name ("mxfp4")
  bool block = false;         // a block scheme
  DType dtype = DType::fp32;  // element targets only: the format
  bool block_scaled = false;  // nvfp4, fp8-block (block_scaled_safetensors.h)
};
// Resolves a --to name (registry names and aliases, scheme names). Throws std::invalid_argument
// listing every accepted name.
ConvertTarget resolve_convert_target(std::string_view to);
// "fp64, fp32, tf32, bf16, ..., mxfp4, ..., int8_channel" for messages and --help.
std::string convert_target_names();

struct FileConvertOptions {
  std::string to;
  Round round = Round::nearest_even;
  Overflow overflow = Overflow::ieee;
  uint64_t seed = 0;
  int block_size = 0;  // block targets only; 0 = the scheme's default (32 for MX, 64 int4/nf4)
  int tile_rows = 0;   // nvfp4 (1 or 16), fp8-block (1 or 128); 0 = the weights' tile (16, 128)
  bool pow2_scales = false;  // fp8-block: power-of-two scales
  std::string scale_mode;    // mxfp4: "floor" (OCP MX, the default) or "ceil" (the recipe's)
};

struct TensorConversion {
  std::string name;
  std::vector<int64_t> shape;
  std::string from;                // safetensors dtype ("F32") or, for a block source, its scheme
  std::string to;                  // safetensors dtype or scheme; == from when passed through
  bool converted = false;          // false: an integer/bool tensor copied unchanged
  double max_abs_error = 0.0;      // max |stored - original| over elements (inf if a finite value
                                   // became inf/NaN or a special value changed)
  uint64_t nonfinite_created = 0;  // finite values that became inf or NaN (overflow)
  uint64_t nan_created = 0;        // values that were not NaN and became NaN: an overflow (or an
                                   // infinity) in a format without infinities, E4M3FN's only
                                   // special value, under Overflow::ieee
  uint64_t bytes_before = 0;       // data bytes, companions of block tensors included
  uint64_t bytes_after = 0;
};

struct FileConversion {
  SafeTensorsFile file;
  std::vector<TensorConversion> tensors;
};

// Throws std::invalid_argument when `opt` cannot work for any tensor: unknown target, a block
// size for an element target, a block size or rounding mode the scheme rejects (e.g. an odd block
// for a 4-bit scheme, toward-zero for nf4). convert_safetensors calls it first; callers may call
// it before reading the input to report bad options early.
void validate_convert_options(const FileConvertOptions& opt);

// Converts every floating tensor of `in`. Throws std::invalid_argument for a bad target or
// options, and (naming the tensor) when a tensor cannot be stored, e.g. NaN/inf into an int
// scheme; SafeTensorsError for a malformed block tensor or a name clash of companion tensors.
FileConversion convert_safetensors(const SafeTensorsFile& in, const FileConvertOptions& opt);

}  // namespace mixp
