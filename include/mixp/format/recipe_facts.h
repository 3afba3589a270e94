// The facts of the training recipes' block-scaled formats (format/block_scaled.h; docs/fp4.md),
// for `mixp formats --table`: one row per scheme and tile, with the storage cost including the
// scales and the range a tensor can span.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "mixp/format/block_scaled.h"
#include "mixp/format/dtype.h"

namespace mixp {

struct BlockScaledFacts {
  std::string name;  // "nvfp4", "mxfp4", "fp8-block"
  BlockScheme scheme;
  int tile_rows, tile_cols;       // 1x16, 16x16, 1x32, 1x128, 128x128
  DType element;                  // fp4_e2m1 or fp8_e4m3
  std::string_view block_scale;   // "fp8_e4m3", "e8m0", "fp32"
  std::string_view tensor_scale;  // "fp32 (amax / 2688)" for nvfp4, "none" otherwise
  // Bits per stored value: element bits + block scale bits / values per tile (the per-tensor
  // fp32 of nvfp4 adds 32 bits per tensor, left out: it vanishes for any real tensor).
  double bits_per_value;
  // Largest magnitude: nvfp4 scales the tensor so that its amax is the largest value (reported
  // as 1, i.e. relative to the amax); the others in absolute terms.
  double max_value;
  // Smallest positive value, on the same footing as max_value.
  double min_positive;
  bool relative_to_amax;  // nvfp4: max_value and min_positive are multiples of the tensor's amax
  // max / min positive within one block (the element's own range) and within one tensor.
  double block_dynamic_range;
  double tensor_dynamic_range;
};

// The five rows: nvfp4 1x16 and 16x16, mxfp4 1x32, fp8-block 1x128 and 128x128.
std::vector<BlockScaledFacts> block_scaled_facts();

}  // namespace mixp
