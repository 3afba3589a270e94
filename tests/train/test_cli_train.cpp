// `mixp train` and `mixp eval` as a user runs them: --json fields, --log lines, resume through the
// CLI, and bad input (one-line error, non-zero exit, no checkpoint left behind).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "mixp/data/idx.h"
#include "train_test_util.h"

namespace mixp::train {
namespace {

using testing::run_cli;
using testing::TempDir;

const std::string kSmall =
    "train --model mlp --data synthetic --train-limit 256 --test-limit 128 --batch 32 --threads 1 ";

// One line on stderr, starting with the command, and nothing on stdout.
void expect_clean_error(const testing::CliResult& r, const std::string& needle) {
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  EXPECT_EQ(r.err.rfind("mixp train: error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(CliTrain, JsonHasTheContractFieldsAndLogLinesParse) {
  TempDir dir;
  const auto log = dir / "run.jsonl";
  const auto r = run_cli(kSmall + "--steps 5 --json --log '" + log.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* k :
       {"model", "precision", "steps", "skipped_steps", "ms_per_step", "samples_per_s",
        "test_accuracy", "final_loss", "peak_memory_bytes", "energy_joules", "energy_source",
        "peak_rss_bytes", "train_time_s", "threads", "batch", "epochs", "seed", "memory_device"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
  EXPECT_EQ(j["memory_device"], "cpu");  // the peaks are the training device's allocator
  EXPECT_EQ(j["model"], "mlp");
  EXPECT_EQ(j["precision"], "fp32");
  EXPECT_EQ(j["steps"], 5);
  EXPECT_EQ(j["skipped_steps"], 0);
  EXPECT_EQ(j["threads"], 1);
  EXPECT_EQ(j["batch"], 32);
  if (j["energy_source"] == "unavailable") {
    EXPECT_TRUE(j["energy_joules"].is_null());
  }
  EXPECT_TRUE(r.err.empty()) << "no progress bar when stderr is not a terminal: " << r.err;

  std::ifstream in(log);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    const auto l = nlohmann::json::parse(line);
    EXPECT_EQ(l["step"], ++n);
    EXPECT_EQ(l["loss_scale"], 1.0);
    EXPECT_EQ(l["skipped"], false);
    EXPECT_GT(l["grad_norm"].get<double>(), 0);
    EXPECT_DOUBLE_EQ(l["lr"].get<double>(), 1e-3);
    EXPECT_TRUE(l["loss"].is_number());
  }
  EXPECT_EQ(n, 5);
}

TEST(CliTrain, SaveResumeAndEval) {
  TempDir dir;
  const auto ck = (dir / "ck").string();
  auto r = run_cli(kSmall + "--steps 3 --save '" + ck + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("test accuracy"), std::string::npos) << r.out;
  for (const char* f : {"model.safetensors", "optimizer.safetensors", "state.json"}) {
    EXPECT_TRUE(std::filesystem::exists(dir / "ck" / f)) << f;
  }
  // Resume takes model, data and batch from the checkpoint.
  r = run_cli("train --resume '" + ck + "' --steps 6 --json --save '" + ck + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["steps"], 6);
  EXPECT_EQ(j["steps_this_run"], 3);
  r = run_cli("eval --checkpoint '" + ck + "' --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["step"], 6);
  EXPECT_GT(j["test_accuracy"].get<double>(), 0.0);
  EXPECT_EQ(j["samples"], 128);
}

TEST(CliTrain, BadInputIsAOneLineErrorWithoutACheckpoint) {
  TempDir dir;
  const std::string save = "--save '" + (dir / "ck").string() + "' ";
  std::ofstream(dir / "short.txt") << "a corpus far shorter than the context\n";
  struct Case {
    std::string args, needle;
  };
  const std::vector<Case> cases = {
      {"--model mlp --epochs 1 --steps 5", "--epochs and --steps"},
      {"--model mlp --batch 0", "--batch: must be an integer from 1"},
      {"--model mlp --batch -4", "--batch: must be an integer from 1"},
      {"--model resnet", "unknown model 'resnet'"},
      {"--model mlp --optimizer lion", "unknown optimizer 'lion'"},
      {"--model mlp --precision fp7", "unknown precision 'fp7'; available: fp64, fp32, tf32"},
      {"--model mlp --precision 'bf16:params=fp32,speed=max'", "unknown policy key 'speed'"},
      {"--model mlp --precision bf16 --layer-precision attn=bf16",
       "'attn' matches no module of this model"},
      {"--model mlp --precision fp64 --layer-precision fc1=fp32", "needs a recipe below fp64"},
      {"--model mlp --loss-scale-init 1024", "--loss-scale-init only applies to dynamic loss"},
      {"--model mlp --precision bf16 --growth-interval 10", "bf16 has fp32's exponent range"},
      {"--model mlp --data '" + (dir / "nowhere").string() + "'", "dataset-fashion-mnist"},
      {"--model gpt --data '" + (dir / "short.txt").string() + "' --context 128", "context"},
      {"--model mlp --data synthetic --lr 1e30 --optimizer sgd --momentum 0 --steps 5", "step 2"},
      {"--model mlp --resume '" + (dir / "nowhere").string() + "'", "does not exist"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.args);
    const auto r = run_cli(
        "train " + c.args + " --threads 1 --train-limit 256 --test-limit 64 " + save);
    expect_clean_error(r, c.needle);
    EXPECT_FALSE(std::filesystem::exists(dir / "ck"));
  }
}

// Issue 28: --model gpt2 without --data trains over the fortunes corpus' characters; the summary
// says so, since nothing else would show that the vocabulary is not GPT-2's.
TEST(CliTrain, Gpt2OnACharacterCorpusSaysItsVocabularyIsNotGpt2s) {
  const std::string small =
      " --layers 1 --width 32 --heads 2 --context 16 --batch 2 --steps 1 --no-eval --threads 1";
  auto r = run_cli("train --model gpt2" + small);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto at = r.out.find("data:");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
  EXPECT_NE(line.find(" from the fortunes corpus: not GPT-2's 50257"), std::string::npos) << line;
  EXPECT_NE(line.find("(vocabulary "), std::string::npos) << line;

  r = run_cli("train --model gpt2 --data synthetic --train-limit 4000" + small);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(" from synthetic: not GPT-2's 50257"), std::string::npos) << r.out;

  r = run_cli("train --model gpt" + small);  // a character model by design: nothing to say
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("GPT-2's"), std::string::npos) << r.out;
}

TEST(CliTrain, CorruptDataIsReportedByFile) {
  TempDir dir;
  std::filesystem::create_directories(dir / "fm");
  // A truncated gzip images file and a valid labels file.
  std::vector<uint8_t> pixels(4 * 28 * 28, 7);
  const int64_t img_dims[] = {4, 28, 28};
  data::write_idx(dir / "fm" / "train-images-idx3-ubyte.gz", data::IdxType::u8, img_dims, pixels,
                  true);
  std::vector<uint8_t> labels = {0, 1, 2, 3};
  const int64_t lab_dims[] = {4};
  data::write_idx(dir / "fm" / "train-labels-idx1-ubyte.gz", data::IdxType::u8, lab_dims, labels,
                  true);
  data::write_idx(dir / "fm" / "t10k-images-idx3-ubyte.gz", data::IdxType::u8, img_dims, pixels,
                  true);
  data::write_idx(dir / "fm" / "t10k-labels-idx1-ubyte.gz", data::IdxType::u8, lab_dims, labels,
                  true);
  auto r =
      run_cli("train --model mlp --batch 2 --steps 1 --json --data '" + (dir / "fm").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;  // the valid folder trains

  const auto imgs = dir / "fm" / "train-images-idx3-ubyte.gz";
  const auto size = std::filesystem::file_size(imgs);
  std::filesystem::resize_file(imgs, size / 2);
  r = run_cli("train --model mlp --batch 2 --steps 1 --data '" + (dir / "fm").string() + "'");
  expect_clean_error(r, "train-images-idx3-ubyte.gz");

  // float32 images (IDX type 0x0D, big-endian) with a NaN pixel: refused where the data enter.
  std::vector<uint8_t> floats(4 * 28 * 28 * 4, 0);
  floats[4 * (2 * 28 * 28 + 5)] = 0x7F;  // sample 2, row 0, col 5: 0x7FC00000 = NaN
  floats[4 * (2 * 28 * 28 + 5) + 1] = 0xC0;
  data::write_idx(imgs, data::IdxType::f32, img_dims, floats, true);
  r = run_cli("train --model mlp --batch 2 --steps 1 --data '" + (dir / "fm").string() + "'");
  expect_clean_error(r, "not finite");
}

}  // namespace
}  // namespace mixp::train
