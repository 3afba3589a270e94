// A checkpoint whose state.json was edited (or put next to another run's weights) with its
// manifest removed, so that only the reader's own checks stand between it and wrong numbers
// (issue 28, items 4 and 10; src/train/checkpoint_recipe.cpp): every load path (resume, eval,
// quantize) refuses it, naming state.json and the field, or model.safetensors and the tensor.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "common/cli_runner.h"
#include "common/temp_dir.h"
#include "mixp/data/idx.h"
#include "mixp/io/manifest.h"
#include "mixp/train/checkpoint.h"
#include "common/test_paths.h"

namespace mixp {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::CliResult;
using test::read_text;
using test::TempDir;
using test::write_text;

// A small IDX data set (random pixels, 10 classes) in `dir`: 256 training and 64 test images.
void write_idx_set(const fs::path& dir) {
  fs::create_directories(dir);
  std::mt19937 rng(7);
  auto set = [&](const std::string& prefix, int64_t n) {
    std::vector<uint8_t> px(static_cast<size_t>(n * 28 * 28));
    for (auto& p : px) p = uint8_t(rng());
    std::vector<uint8_t> labels(static_cast<size_t>(n));
    for (auto& l : labels) l = uint8_t(rng() % 10);
    const int64_t idims[] = {n, 28, 28};
    const int64_t ldims[] = {n};
    data::write_idx(dir / (prefix + "-images-idx3-ubyte"), data::IdxType::u8, idims, px, false);
    data::write_idx(dir / (prefix + "-labels-idx1-ubyte"), data::IdxType::u8, ldims, labels, false);
  };
  set("train", 256);
  set("t10k", 64);
}

const std::string kTrain =
    "train --model mlp --width 16 --data idx --train-limit 256 --batch 16 --threads 1 --seed 3 "
    "--steps 4 --no-eval";

CliResult mixp_in(const fs::path& dir, const std::string& args) {
  return test::run_shell("cd '" + dir.string() + "' && '" + MIXP_CLI + "' " + args);
}

class RecordedRecipe : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    write_idx_set(dir_->path() / "idx");
    for (const char* p : {"fp32", "bf16-pure"}) {
      const CliResult r =
          mixp_in(dir_->path(), kTrain + " --precision " + p + " --save " + p);
      ASSERT_EQ(r.exit_code, 0) << r.err;
    }
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  // A copy of checkpoint `from` without its manifest (a legacy checkpoint, or one whose manifest
  // was removed after an edit), with state.json edited by `edit`.
  static fs::path damaged(const std::string& name, const std::string& from,
                          const std::function<void(json&)>& edit) {
    const fs::path to = dir_->path() / name;
    fs::remove_all(to);
    fs::copy(dir_->path() / from, to, fs::copy_options::recursive);
    fs::remove(to / kManifestFile);
    json j = json::parse(read_text(to / train::kStateFile));
    edit(j);
    write_text(to / train::kStateFile, j.dump(2));
    return to;
  }
  // Resume, eval and quantize all fail with exit 1 and one error line containing every needle.
  static void expect_refused(const fs::path& ck, const std::vector<std::string>& needles) {
    const std::string name = ck.filename().string();
    for (const std::string& args :
         {"train --resume " + name + " --steps 6 --no-eval", "eval --checkpoint " + name,
          "quantize --checkpoint " + name + " --calibrate 1"}) {
      SCOPED_TRACE(args);
      const CliResult r = mixp_in(dir_->path(), args);
      EXPECT_EQ(r.exit_code, 1) << r.err;
      EXPECT_NE(r.err.find(": error: "), std::string::npos) << r.err;
      for (const std::string& n : needles) EXPECT_NE(r.err.find(n), std::string::npos) << r.err;
    }
  }
  static TempDir* dir_;
};
TempDir* RecordedRecipe::dir_ = nullptr;

// Item 4: config.precision fp32 -> bf16 (recipe.name left): eval exited 0 with another loss.
TEST_F(RecordedRecipe, PrecisionEditedAloneIsRefusedByEveryLoad) {
  const fs::path ck =
      damaged("prec", "fp32", [](json& j) { j["config"]["precision"] = "bf16"; });
  expect_refused(ck, {"prec/state.json", "\"recipe.name\" is \"fp32\"",
                      "\"config.precision\" \"bf16\""});
}

// Item 4: a bf16-pure state.json next to fp32 weights (each file consistent in itself).
TEST_F(RecordedRecipe, StateOfAnotherRecipeNextToTheWeightsIsRefused) {
  const fs::path ck = damaged("mixed", "fp32", [](json&) {});
  fs::copy_file(dir_->path() / "bf16-pure" / train::kStateFile, ck / train::kStateFile,
                fs::copy_options::overwrite_existing);
  expect_refused(ck, {"mixed/model.safetensors", "tensor 'fc1.weight' is stored as fp32",
                      "precision \"bf16-pure\"", "keeps it in bf16"});
  // The weights alone are what the recipe says: the untouched checkpoints load.
  for (const char* p : {"fp32", "bf16-pure"}) {
    const CliResult r = mixp_in(dir_->path(), std::string("eval --checkpoint ") + p);
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
  // Evaluated in another precision, the weights are still checked against the recorded recipe.
  const CliResult other = mixp_in(dir_->path(), "eval --checkpoint mixed --precision fp32");
  EXPECT_EQ(other.exit_code, 1) << other.err;
  EXPECT_NE(other.err.find("keeps it in bf16"), std::string::npos) << other.err;
}

// Item 4: config.data changed to "synthetic" trained on synthetic data without a word.
TEST_F(RecordedRecipe, DataEditedIsRefused) {
  const fs::path ck = damaged("data", "fp32", [](json& j) { j["config"]["data"] = "synthetic"; });
  expect_refused(ck, {"data/state.json", "\"config.data\" is \"synthetic\"",
                      "trained on \"idx\""});
  // Both names edited: the training set's checksum still tells the data apart.
  const fs::path ck2 = damaged("data2", "fp32", [](json& j) {
    j["config"]["data"] = "synthetic";
    j["config"]["data_fingerprint"]["data"] = "synthetic";
  });
  const CliResult r = mixp_in(dir_->path(), "train --resume data2 --steps 6 --no-eval");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("data2/state.json: the checkpoint was trained on \"synthetic\""),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("training set crc32:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("this run loaded \"synthetic\""), std::string::npos) << r.err;
}

// The data set may move (--data names its new place while the old one is gone), not change.
TEST_F(RecordedRecipe, MovedDataResumesChangedDataDoesNot) {
  TempDir dir;
  write_idx_set(dir / "idx");
  ASSERT_EQ(mixp_in(dir.path(), kTrain + " --save ck").exit_code, 0);
  fs::rename(dir / "idx", dir / "moved");
  const CliResult moved = mixp_in(dir.path(), "train --resume ck --data moved --steps 6 --no-eval");
  EXPECT_EQ(moved.exit_code, 0) << moved.err;
  // One training label changed in the moved copy: the same size, other data.
  std::vector<uint8_t> labels = test::read_bytes(dir / "moved" / "train-labels-idx1-ubyte");
  labels.back() = uint8_t((labels.back() + 1) % 10);
  test::write_bytes(dir / "moved" / "train-labels-idx1-ubyte", labels);
  const CliResult changed =
      mixp_in(dir.path(), "train --resume ck --data moved --steps 6 --no-eval");
  EXPECT_EQ(changed.exit_code, 1) << changed.err;
  EXPECT_NE(changed.err.find("ck/state.json: the checkpoint was trained on \"idx\""),
            std::string::npos)
      << changed.err;
}

// Item 10: errors while reading a damaged state.json name the file and the field.
TEST_F(RecordedRecipe, DamagedConfigNamesFileAndField) {
  struct Case {
    std::string name;
    std::function<void(json&)> edit;
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases = {
      {"fp99", [](json& j) { j["config"]["precision"] = "fp99"; },
       {"fp99/state.json", "\"config.precision\" is \"fp99\""}},
      {"batch", [](json& j) { j["config"]["batch"] = 64; },
       {"batch/state.json", "\"config.batch\" is 64", "batches of 16"}},
      {"cnn", [](json& j) { j["config"]["model"]["name"] = "cnn"; },
       {"cnn/state.json", "\"config.model.name\" is \"cnn\"", "saved from a \"mlp\" model"}},
      {"empty", [](json& j) { j["config"] = json::object(); },
       {"empty/state.json", "\"config.model.name\""}},
      {"layers", [](json& j) { j["config"]["layer_precision"] = "nosuchlayer=bf17"; },
       {"layers/state.json", "\"config.layer_precision\""}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    expect_refused(damaged(c.name, "fp32", c.edit), c.needles);
  }
}

}  // namespace
}  // namespace mixp
