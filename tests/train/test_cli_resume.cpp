// `mixp train --resume` flag by flag (docs/train.md "Resuming"): each flag that overrides the
// checkpoint really changes the resumed run (and a flag left out keeps the checkpoint's value),
// and each flag that must match the checkpoint is refused with a one-line error naming it when
// its value differs. Small synthetic runs on one thread: each test takes well under a second or
// two.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mixp/data/idx.h"
#include "train_test_util.h"

namespace mixp::train {
namespace {

using testing::CliResult;
using testing::read_text;
using testing::run_cli;
using testing::TempDir;
using Json = nlohmann::json;

// 256 samples in batches of 32: 8 steps per epoch.
const std::string kMlp =
    "train --model mlp --data synthetic --train-limit 256 --test-limit 128 --batch 32 "
    "--threads 1 ";
const std::string kGpt =
    "train --model gpt --data synthetic --train-limit 20000 --test-limit 16 --batch 8 --width 32 "
    "--layers 2 --heads 2 --context 32 --mlp-width 64 --threads 1 ";

std::string q(const std::filesystem::path& p) {
  std::string s = "'";
  s += p.string();
  s += '\'';
  return s;
}

// Trains `base + args` and saves the checkpoint to dir/name; returns its path.
std::filesystem::path make_checkpoint(const TempDir& dir, const std::string& base,
                                      const std::string& args, const std::string& name = "ck") {
  const auto ck = dir / name;
  const CliResult r = run_cli(base + args + " --save " + q(ck));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return ck;
}

CliResult resume(const std::filesystem::path& ck, const std::string& args) {
  return run_cli("train --resume " + q(ck) + " " + args);
}

Json state_of(const std::filesystem::path& ck) {
  return Json::parse(read_text(ck / "state.json"));
}

std::vector<Json> log_rows(const std::filesystem::path& log) {
  std::vector<Json> rows;
  std::ifstream in(log);
  std::string line;
  while (std::getline(in, line)) rows.push_back(Json::parse(line));
  return rows;
}

std::vector<double> losses(const std::vector<Json>& rows) {
  std::vector<double> v;
  for (const auto& r : rows) v.push_back(r["loss"].get<double>());
  return v;
}

// Resumes `ck` twice for `steps` steps, without and with `flag`, and returns both logs.
std::pair<std::vector<Json>, std::vector<Json>> resume_without_and_with(
    const TempDir& dir, const std::filesystem::path& ck, int64_t steps, const std::string& flag) {
  const auto a = dir / "without.jsonl", b = dir / "with.jsonl";
  const std::string common = "--steps " + std::to_string(steps) + " --no-eval --log ";
  CliResult r = resume(ck, common + q(a));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = resume(ck, common + q(b) + " " + flag);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return {log_rows(a), log_rows(b)};
}

// ---------------------------------------------------------------------------------------------
// Flags that override the checkpoint.

// GradScaler's rule (amp/grad_scaler.h) replayed over a log: each row's loss_scale must be what
// the rule gives from the checkpoint's scale and tracker with `interval`.
void expect_scaler_rule(const std::vector<Json>& rows, double scale, int64_t tracker,
                        int64_t interval) {
  ASSERT_FALSE(rows.empty());
  int64_t grown = 0;
  for (const auto& row : rows) {
    ASSERT_EQ(row["loss_scale"].get<double>(), scale) << "step " << row["step"];
    if (row["skipped"].get<bool>()) {
      scale = std::max(scale * 0.5, 1.0);
      tracker = 0;
    } else if (++tracker >= interval) {
      scale *= 2;
      tracker = 0;
      ++grown;
    }
  }
  EXPECT_GE(grown, 2) << "the run is too short to see the growth interval";
}

TEST(CliResume, GrowthIntervalGivenOnResumeOverridesTheCheckpoints) {
  // Issue 11: the checkpoint's scaler state used to overwrite --growth-interval.
  TempDir dir;
  const auto ck = make_checkpoint(
      // 2^22 skips the first 6 steps, then trains (a run that skips more than half of its
      // steps did not train and exits 1: docs/train.md).
      dir, kMlp, "--precision fp16 --loss-scale-init 4194304 --growth-interval 5 --steps 20");
  const Json saved = state_of(ck)["recipe"]["state"];
  const double scale = saved["scale"].get<double>();
  const auto tracker = int64_t(saved["_growth_tracker"].get<double>());

  const auto log = dir / "res.jsonl";
  const auto out = dir / "ck2";
  CliResult r = resume(ck, "--steps 40 --growth-interval 3 --no-eval --json --log " + q(log) +
                               " --save " + q(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.json()["recipe"].get<std::string>().find("growth interval 3"), std::string::npos);
  expect_scaler_rule(log_rows(log), scale, tracker, 3);
  const Json s2 = state_of(out);
  EXPECT_EQ(s2["config"]["growth_interval"], 3);
  EXPECT_EQ(s2["recipe"]["state"]["growth_interval"], 3.0);

  // Left out, the checkpoint's interval stays.
  r = resume(ck, "--steps 40 --no-eval --log " + q(log));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_scaler_rule(log_rows(log), scale, tracker, 5);
}

TEST(CliResume, LrGivenOnResumeOverridesTheCheckpoints) {
  TempDir dir;
  const auto ck = make_checkpoint(dir, kMlp, "--lr 0.002 --steps 3");
  const auto [without, with] = resume_without_and_with(dir, ck, 6, "--lr 0.005");
  ASSERT_EQ(without.size(), 3u);
  ASSERT_EQ(with.size(), 3u);
  for (const auto& row : without) EXPECT_EQ(row["lr"].get<double>(), 0.002);
  for (const auto& row : with) EXPECT_EQ(row["lr"].get<double>(), 0.005);
}

TEST(CliResume, ScheduleGivenOnResumeOverridesTheCheckpoints) {
  TempDir dir;
  const auto ck = make_checkpoint(dir, kMlp, "--lr 0.004 --steps 3");
  const auto [without, with] = resume_without_and_with(dir, ck, 8, "--schedule linear");
  ASSERT_EQ(with.size(), 5u);
  for (const auto& row : without) EXPECT_EQ(row["lr"].get<double>(), 0.004);
  for (const auto& row : with) {
    // linear to 0 over the whole run's 8 steps, at the number of steps taken before this one.
    const double p = double(row["step"].get<int64_t>() - 1) / 8.0;
    EXPECT_DOUBLE_EQ(row["lr"].get<double>(), 0.004 + (0.0 - 0.004) * p) << row;
  }
}

TEST(CliResume, WarmupGivenOnResumeOverridesTheCheckpoints) {
  TempDir dir;
  const auto ck = make_checkpoint(dir, kMlp, "--lr 0.004 --steps 3");
  const auto [without, with] = resume_without_and_with(dir, ck, 6, "--warmup 100");
  ASSERT_EQ(with.size(), 3u);
  for (const auto& row : without) EXPECT_EQ(row["lr"].get<double>(), 0.004);
  for (const auto& row : with) {
    const int64_t step = row["step"].get<int64_t>();  // lr * (taken + 1) / warmup
    EXPECT_DOUBLE_EQ(row["lr"].get<double>(), 0.004 * double(step) / 100.0) << row;
  }
}

TEST(CliResume, StepsAndEpochsGivenOnResumeOverrideTheCheckpoints) {
  TempDir dir;
  const auto ck = make_checkpoint(dir, kMlp, "--steps 3 --no-eval");
  CliResult r = resume(ck, "--epochs 2 --no-eval --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.json()["steps"], 16);  // 2 epochs of 8 steps, the 3 resumed ones included
  EXPECT_EQ(r.json()["steps_this_run"], 13);
  r = resume(ck, "--steps 5 --no-eval --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.json()["steps"], 5);
  EXPECT_EQ(r.json()["steps_this_run"], 2);
  const auto ck8 = make_checkpoint(dir, kMlp, "--epochs 1 --no-eval", "ck8");
  r = resume(ck8, "--steps 10 --no-eval --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.json()["steps"], 10);
  r = resume(ck8, "--no-eval --json");  // the checkpoint's length: 1 epoch, already done
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.json()["steps_this_run"], 0);
  r = resume(ck8, "--steps 5 --no-eval --json");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("the checkpoint is already at step 8"), std::string::npos) << r.err;
}

TEST(CliResume, ClipGivenOnResumeOverridesTheCheckpoints) {
  // SGD without momentum or weight decay: clipped to a norm of 1e-12, the steps barely move the
  // weights, so the test loss stays the checkpoint's; unclipped it moves.
  TempDir dir;
  const auto ck = make_checkpoint(dir, kMlp, "--optimizer sgd --momentum 0 --lr 0.1 --steps 3");
  const double before = state_of(ck)["metrics"]["test_loss"].get<double>();
  CliResult r = resume(ck, "--steps 6 --json --clip 1e-12");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NEAR(r.json()["test_loss"].get<double>(), before, 1e-6);
  r = resume(ck, "--steps 6 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GT(std::abs(r.json()["test_loss"].get<double>() - before), 1e-3);
}

TEST(CliResume, WeightDecayGivenOnResumeOverridesTheCheckpoints) {
  TempDir dir;
  const auto ck = make_checkpoint(dir, kMlp, "--weight-decay 0 --steps 3");
  const auto [without, with] = resume_without_and_with(dir, ck, 6, "--weight-decay 0.5");
  ASSERT_EQ(with.size(), 3u);
  const auto a = losses(without), b = losses(with);
  EXPECT_EQ(a[0], b[0]);  // the first resumed step's loss comes before any update
  EXPECT_NE(a[2], b[2]);
  // The checkpoint's value, given explicitly, is the same run as leaving the flag out.
  const auto [same, again] = resume_without_and_with(dir, ck, 6, "--weight-decay 0");
  EXPECT_EQ(losses(same), losses(again));
}

TEST(CliResume, MomentumGivenOnResumeOverridesTheCheckpoints) {
  TempDir dir;
  const auto ck = make_checkpoint(dir, kMlp, "--optimizer sgd --momentum 0.9 --lr 0.05 --steps 3");
  const auto [without, with] = resume_without_and_with(dir, ck, 6, "--momentum 0.5");
  ASSERT_EQ(with.size(), 3u);
  const auto a = losses(without), b = losses(with);
  EXPECT_EQ(a[0], b[0]);
  EXPECT_NE(a[1], b[1]);
}

TEST(CliResume, ThreadsGivenOnResumeOverridesTheCheckpoints) {
  TempDir dir;
  const auto ck = make_checkpoint(dir, kMlp, "--steps 2 --no-eval");
  CliResult r = resume(ck, "--steps 3 --no-eval --json --threads 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.json()["threads"], 2);
  r = resume(ck, "--steps 3 --no-eval --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.json()["threads"], 1);  // the checkpoint's
}

TEST(CliResume, TestLimitGivenOnResumeOverridesTheCheckpoints) {
  TempDir dir;
  const auto ck = make_checkpoint(dir, kMlp, "--steps 2");
  const auto out = dir / "ck2";
  CliResult r = resume(ck, "--steps 3 --json --test-limit 40 --save " + q(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const double loss = r.json()["test_loss"].get<double>();
  // `mixp eval` of the new checkpoint evaluates its configuration's 40 samples, with the loss the
  // resumed run reported: that run evaluated on 40 samples too.
  r = run_cli("eval --checkpoint " + q(out) + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.json()["samples"], 40);
  EXPECT_EQ(r.json()["test_loss"].get<double>(), loss);
}

TEST(CliResume, NoEvalAppliesToItsOwnRunOnly) {
  TempDir dir;
  const auto ck = make_checkpoint(dir, kMlp, "--steps 2 --no-eval");
  CliResult r = resume(ck, "--steps 3 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.json()["test_accuracy"].is_number()) << "not inherited from the checkpoint";
  r = resume(ck, "--steps 3 --json --no-eval");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.json()["test_accuracy"].is_null());
}

TEST(CliResume, LogGivenOnResumeGetsThisRunsSteps) {
  TempDir dir;
  const auto first = dir / "first.jsonl";
  const auto ck = make_checkpoint(dir, kMlp, "--steps 3 --no-eval --log " + q(first));
  ASSERT_EQ(log_rows(first).size(), 3u);
  CliResult r = resume(ck, "--steps 5 --no-eval");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(log_rows(first).size(), 3u) << "the first run's log is not this run's";
  const auto second = dir / "second.jsonl";
  r = resume(ck, "--steps 5 --no-eval --log " + q(second));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto rows = log_rows(second);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["step"], 4);
  EXPECT_EQ(rows[1]["step"], 5);
}

TEST(CliResume, SaveEveryGivenOnResumeSavesDuringTheRun) {
  // The run is made to fail: --lr 1e30 wrecks the weights at step 4, and step 5's loss is NaN.
  // With --save-every 1 the checkpoint of step 4 is on disk; without, nothing is (the first
  // run's --save-every is not inherited).
  TempDir dir;
  const auto ck = make_checkpoint(
      dir, kMlp, "--optimizer sgd --momentum 0 --steps 3 --no-eval --save-every 1");
  const auto out = dir / "ck2";
  CliResult r = resume(ck, "--steps 10 --no-eval --lr 1e30 --save " + q(out));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("step 5"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(out));
  r = resume(ck, "--steps 10 --no-eval --lr 1e30 --save-every 1 --save " + q(out));
  EXPECT_NE(r.exit_code, 0);
  ASSERT_TRUE(std::filesystem::exists(out / "state.json"));
  EXPECT_EQ(state_of(out)["step"], 4);
}

TEST(CliResume, SaveGivenOnResumeWritesThere) {
  TempDir dir;
  const auto ck = make_checkpoint(dir, kMlp, "--steps 2 --no-eval");
  CliResult r = resume(ck, "--steps 3 --no-eval");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(state_of(ck)["step"], 2) << "without --save the checkpoint is left as it was";
  const auto out = dir / "ck2";
  r = resume(ck, "--steps 3 --no-eval --json --save " + q(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(state_of(out)["step"], 3);
  EXPECT_EQ(r.json()["checkpoint"], out.string());
}

TEST(CliResume, QatDisableObserverEpochGivenOnResumeOverridesTheCheckpoints) {
  // Resumed in epoch 1 (steps 9-16): observers on (checkpoint: from epoch 5) or off (given: 1).
  TempDir dir;
  const auto ck = make_checkpoint(
      dir, kMlp, "--precision int8-qat --qat-disable-observer-epoch 5 --steps 9 --no-eval");
  const auto [without, with] = resume_without_and_with(
      dir, ck, 12, "--qat-disable-observer-epoch 1 --save " + q(dir / "ck2"));
  ASSERT_EQ(with.size(), 3u);
  EXPECT_NE(losses(without), losses(with));
  EXPECT_EQ(state_of(dir / "ck2")["recipe"]["state"]["disable_observer_epoch"], 1.0);
}

TEST(CliResume, QatFreezeBnEpochGivenOnResumeOverridesTheCheckpoints) {
  // cnn (the mlp has no batch norm): frozen from epoch 0 when given, never in the checkpoint.
  TempDir dir;
  const auto ck = make_checkpoint(
      dir,
      "train --model cnn --data synthetic --train-limit 64 --test-limit 32 --batch 16 --threads 1 ",
      "--precision int8-qat --qat-freeze-bn-epoch 5 --steps 2 --no-eval");
  const auto [without, with] =
      resume_without_and_with(dir, ck, 4, "--qat-freeze-bn-epoch 0 --save " + q(dir / "ck2"));
  ASSERT_EQ(with.size(), 2u);
  EXPECT_NE(losses(without), losses(with));
  EXPECT_EQ(state_of(dir / "ck2")["recipe"]["state"]["freeze_bn_epoch"], 0.0);
}

TEST(CliResume, CheckpointingGivenOnResumeOverridesTheCheckpoints) {
  TempDir dir;
  const auto ck = make_checkpoint(dir, kGpt, "--steps 2 --no-eval");
  CliResult r = resume(ck, "--steps 4 --no-eval --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json plain = r.json();
  const auto out = dir / "ck2";
  r = resume(ck, "--steps 4 --no-eval --json --checkpointing --save " + q(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json recomputed = r.json();
  EXPECT_EQ(recomputed["final_loss"], plain["final_loss"]);  // the same values, less memory
  EXPECT_LT(recomputed["peak_memory_bytes"].get<int64_t>(), plain["peak_memory_bytes"].get<int64_t>());
  EXPECT_EQ(state_of(out)["config"]["model"]["checkpointing"], true);
  // And off again from a checkpoint that has it on.
  r = resume(out, "--steps 6 --no-eval --json --no-checkpointing --save " + q(dir / "ck3"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(state_of(dir / "ck3")["config"]["model"]["checkpointing"], false);
}

// A folder of n IDX images (train and test), pixel values depending on `salt`.
void write_idx_folder(const std::filesystem::path& dir, int64_t n, int salt) {
  std::filesystem::create_directories(dir);
  std::vector<uint8_t> pixels(size_t(n) * 28 * 28);
  std::vector<uint8_t> labels(static_cast<size_t>(n));
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = uint8_t((i * 7 + size_t(salt)) % 251);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = uint8_t(i % 10);
  const int64_t img[] = {n, 28, 28}, lab[] = {n};
  for (const std::string split : {"train", "t10k"}) {
    data::write_idx(dir / (split + "-images-idx3-ubyte.gz"), data::IdxType::u8, img, pixels, true);
    data::write_idx(dir / (split + "-labels-idx1-ubyte.gz"), data::IdxType::u8, lab, labels, true);
  }
}

TEST(CliResume, DataMayMoveButNotChange) {
  // --data may name the checkpoint's data set in a new place once it has moved; other data (a
  // named data set, a folder while the checkpoint's is still there, a folder of another size) is
  // refused.
  TempDir dir;
  write_idx_folder(dir / "a", 64, 0);
  const auto ck = make_checkpoint(
      dir, "train --model mlp --batch 16 --threads 1 --data " + q(dir / "a") + " ",
      "--steps 2 --no-eval");
  std::filesystem::copy(dir / "a", dir / "copy");
  CliResult r = resume(ck, "--steps 4 --no-eval --data " + q(dir / "copy"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("does not match checkpoint"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("which is still there"), std::string::npos) << r.err;
  r = resume(ck, "--steps 4 --no-eval --data synthetic");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--data synthetic does not match checkpoint"), std::string::npos) << r.err;

  std::filesystem::rename(dir / "a", dir / "b");
  r = resume(ck, "--steps 4 --no-eval --json");
  EXPECT_NE(r.exit_code, 0) << "the checkpoint's folder is gone";
  r = resume(ck, "--steps 4 --no-eval --json --data " + q(dir / "b"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.json()["steps"], 4);
  write_idx_folder(dir / "other", 48, 1);
  r = resume(ck, "--steps 4 --no-eval --data " + q(dir / "other"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--data must name the data set it was trained on"), std::string::npos)
      << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

// ---------------------------------------------------------------------------------------------
// Flags that must match the checkpoint: refused when their value differs, accepted when it is
// the checkpoint's (so the first run's command line plus --resume works).

struct MustMatch {
  std::string name;      // the test's name
  std::string base;      // the checkpoint's run
  std::string flag;      // given on resume
  std::string expected;  // in the error
};

void PrintTo(const MustMatch& m, std::ostream* os) {
  *os << m.flag;
}

class CliResumeRefuses : public ::testing::TestWithParam<MustMatch> {};

TEST_P(CliResumeRefuses, AFlagThatMustMatchTheCheckpoint) {
  const MustMatch& m = GetParam();
  TempDir dir;
  const auto ck = make_checkpoint(dir, m.base, "--steps 2 --no-eval");
  const auto out = dir / "ck2";
  const CliResult r = resume(ck, "--steps 4 --no-eval " + m.flag + " --save " + q(out));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err.rfind("mixp train: error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(m.flag + " does not match checkpoint " + ck.string()), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find(m.expected), std::string::npos) << r.err;
  const std::string option = m.flag.substr(0, m.flag.find(' '));
  EXPECT_NE(r.err.find("Drop " + option), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_FALSE(std::filesystem::exists(out));
}

const std::string kMlpFp16 = kMlp + "--precision fp16 ";

INSTANTIATE_TEST_SUITE_P(
    CliResume, CliResumeRefuses,
    ::testing::Values(
        MustMatch{"model", kMlp, "--model cnn", "trained with --model mlp"},
        MustMatch{"data", kMlp, "--data fashion-mnist", "trained with --data synthetic"},
        MustMatch{"width", kMlp, "--width 64", "the model's shape"},
        MustMatch{"layers", kMlp, "--layers 3", "the model's shape"},
        MustMatch{"heads", kGpt, "--heads 4", "trained with --heads 2"},
        MustMatch{"context", kGpt, "--context 16", "trained with --context 32"},
        MustMatch{"mlp_width", kGpt, "--mlp-width 128", "trained with --mlp-width 64"},
        MustMatch{"precision", kMlpFp16, "--precision bf16", "trained with --precision fp16"},
        MustMatch{"precision_options", kMlpFp16, "--precision fp16:growth_interval=3",
                  "can change with --growth-interval"},
        MustMatch{"layer_precision", kMlpFp16, "--layer-precision fc1=fp32",
                  "trained with --layer-precision (none)"},
        MustMatch{"optimizer", kMlp, "--optimizer sgd", "trained with --optimizer adamw"},
        MustMatch{"momentum_off", kMlp + "--optimizer sgd ", "--momentum 0",
                  "momentum buffers that momentum 0 would drop"},
        MustMatch{"momentum_on", kMlp + "--optimizer sgd --momentum 0 ", "--momentum 0.9",
                  "no momentum buffers to continue from"},
        MustMatch{"batch", kMlp, "--batch 64", "the data order continues"},
        MustMatch{"grad_accum", kMlp, "--grad-accum 2", "steps per epoch"},
        MustMatch{"train_limit", kMlp, "--train-limit 128", "the same training samples"},
        MustMatch{"seed", kMlp, "--seed 7", "trained with --seed 0"},
        MustMatch{"loss_scale_init", kMlpFp16, "--loss-scale-init 1024",
                  "continues from the checkpoint's loss scale"}),
    [](const ::testing::TestParamInfo<MustMatch>& info) { return info.param.name; });

TEST(CliResume, MustMatchFlagsGivenWithTheCheckpointsValuesAreAccepted) {
  TempDir dir;
  const std::string first = kMlpFp16 + "--loss-scale-init 4096 --seed 5 --grad-accum 2 ";
  const auto ck = make_checkpoint(dir, first, "--steps 2 --no-eval");
  // The first run's command line again, with --resume and a longer run.
  const CliResult r = run_cli(first + "--steps 4 --no-eval --json --resume " + q(ck));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.json()["steps_this_run"], 2);
}

}  // namespace
}  // namespace mixp::train
