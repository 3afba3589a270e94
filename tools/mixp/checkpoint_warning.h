// The warning `mixp eval` and `mixp quantize` print before reading a checkpoint that has no
// manifest (docs/train.md). Printing only.
#pragma once
#include <iostream>
#include <string>

#include "mixp/train/checkpoint.h"

namespace mixp::cli {

// A checkpoint written before mixp had manifests is read unverified (docs/train.md).
inline void warn_if_unverified(const char* command, const std::string& dir) {
  if (train::checkpoint_is_unverified(dir)) {
    std::cerr << "mixp " << command << ": warning: checkpoint " << dir
              << " has no manifest.json (written by an older mixp), so its files cannot be "
                 "verified; save it again with this mixp to add one\n";
  }
}

}  // namespace mixp::cli
