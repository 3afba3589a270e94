#include "block_tile_flag.h"

#include "command.h"

namespace mixp::cli {

int parse_block_tile(const std::string& tile, BlockScheme scheme) {
  const int tc = block_scaled_tile_cols(scheme);
  const std::string b = std::to_string(tc);
  if (tile == "1x" + b) return 1;
  if (scheme != BlockScheme::mxfp4 && tile == b + "x" + b) return tc;
  throw UsageError("--tile '" + tile + "': " + std::string(to_string(scheme)) + " tiles are 1x" +
                   b + (scheme == BlockScheme::mxfp4 ? "" : " or " + b + "x" + b));
}

}  // namespace mixp::cli
