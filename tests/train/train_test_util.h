// Helpers for the train tests: the shared temp folder and CLI runner (tests/common), under the
// names the train, amp_train, fp8, quant and study_runner tests use, plus the dataset probe.
#pragma once
#include <filesystem>

#include "common/cli_runner.h"
#include "common/temp_dir.h"

namespace mixp::train::testing {

using mixp::test::CliResult;
using mixp::test::read_text;
using mixp::test::run_cli;
using mixp::test::TempDir;

// Fashion-MNIST from Debian's dataset-fashion-mnist, when installed.
inline bool have_fashion_mnist() {
  return std::filesystem::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
}

}  // namespace mixp::train::testing
