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

// A gpt 32 wide with 2 heads and context 16 on 20000 bytes of synthetic text, batch 8, lr 3e-3,
// one thread: the small transformer the recipe tests train (they set what they vary on top).
inline TrainConfig small_gpt(const std::string& precision, int64_t layers = 2) {
  TrainConfig c;
  c.model.name = "gpt";
  c.model.width = 32;
  c.model.layers = layers;
  c.model.heads = 2;
  c.model.context = 16;
  c.data = kSyntheticData;
  c.train_limit = 20000;  // bytes of generated text
  c.batch = 8;
  c.lr = 3e-3;
  c.seed = 1;
  c.threads = 1;
  c.precision = precision;
  return c;
}

}  // namespace mixp::train::testing
