// Helpers for the train tests: the shared temp folder and CLI runner (tests/common), under the
// names the train, amp_train, fp8, quant and study_runner tests use, plus the dataset probe.
#pragma once
#include <filesystem>
#include <string>

#include "common/cli_runner.h"
#include "common/temp_dir.h"
#include "mixp/train/train_config.h"

namespace mixp::train::testing {

using mixp::test::CliResult;
using mixp::test::read_text;
using mixp::test::run_cli;
using mixp::test::TempDir;

// Fashion-MNIST from Debian's dataset-fashion-mnist, when installed.
inline bool have_fashion_mnist() {
  return std::filesystem::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
}

// A 64-wide mlp on 512 synthetic samples, one thread: small enough for a recipe test to train
// it end to end in well under a second.
inline TrainConfig small_mlp(const std::string& precision) {
  TrainConfig c;
  c.model.name = "mlp";
  c.model.width = 64;
  c.data = kSyntheticData;
  c.train_limit = 512;
  c.test_limit = 256;
  c.batch = 32;
  c.seed = 3;
  c.threads = 1;
  c.precision = precision;
  return c;
}

}  // namespace mixp::train::testing
