// `--tile RxC` of the commands that take a block-scaled format (convert --to nvfp4|fp8-block,
// inspect blocks --format ...): 1x16 or 16x16 for nvfp4, 1x128 or 128x128 for fp8-block, 1x32
// for mxfp4. Parsing only; the quantizer (format/block_scaled.h) defines the tiles.
#pragma once
#include <string>

#include "mixp/format/block_scaled.h"

namespace mixp::cli {

// The tile's rows; anything but the scheme's two (mxfp4: one) tiles is a UsageError naming them.
int parse_block_tile(const std::string& tile, BlockScheme scheme);

}  // namespace mixp::cli
