// A run that did not train (docs/train.md "When a run did not train"; issue 28): the Trainer
// reports it in TrainResult::trained and never exits or prints; `mixp train` prints its results,
// then one error line, and exits 1. The same rule is `mixp compare`'s "diverged"
// (tests/study_runner/test_cli_compare.cpp).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "mixp/train/trainer.h"
#include "train_test_util.h"

namespace mixp::train {
namespace {

using ::testing::HasSubstr;
using testing::CliResult;
using testing::run_cli;

// fp16 with a loss scale no gradient fits under: the loss scaler skips every step, while every
// loss stays finite (only the scaled gradients overflow).
TrainResult never_fitting_scale(TrainConfig c) {
  c.loss_scale_init = 1e30;
  c.steps = 4;
  c.evaluate = false;
  Trainer t(c);
  return t.fit();
}

TEST(TrainOutcome, SkippingMostStepsIsNotTraining) {
  const TrainResult r = never_fitting_scale(testing::small_mlp("fp16"));
  EXPECT_EQ(r.skipped_steps_this_run, 4);
  EXPECT_FALSE(r.trained);
  EXPECT_THAT(r.not_trained, HasSubstr("the loss scaler skipped 4 of its 4 optimizer steps"));
  EXPECT_THAT(r.not_trained, HasSubstr("use bf16"));
  const auto j = nlohmann::json::parse(result_to_json(r));
  EXPECT_EQ(j["trained"], false);
  EXPECT_EQ(j["not_trained"], r.not_trained);
}

TEST(TrainOutcome, GptRunsAreJudgedByTheSameRule) {
  const TrainResult r = never_fitting_scale(testing::small_gpt("fp16"));
  EXPECT_FALSE(r.trained);
  EXPECT_THAT(r.not_trained, HasSubstr("skipped 4 of its 4"));
}

TEST(TrainOutcome, AHealthyRunTrained) {
  TrainConfig c = testing::small_mlp("fp16");
  c.steps = 4;
  Trainer t(c);
  const TrainResult r = t.fit();
  EXPECT_EQ(r.skipped_steps, 0);
  EXPECT_TRUE(r.trained) << r.not_trained;
  EXPECT_TRUE(r.not_trained.empty());
  const auto j = nlohmann::json::parse(result_to_json(r));
  EXPECT_EQ(j["trained"], true);
  EXPECT_FALSE(j.contains("not_trained"));
}

const std::string kIssueRun =
    "train --model mlp --width 64 --layers 1 --steps 20 --precision fp16 --lr 1e6 --data "
    "synthetic --train-limit 1024 --test-limit 128 --threads 1 ";

// The issue's run: 19 of 20 steps skipped, a NaN last loss, exit 0 in silence before.
TEST(TrainOutcome, TheCliPrintsTheResultsThenOneErrorLineAndExitsOne) {
  const CliResult r = run_cli(kIssueRun + "--json");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const auto j = nlohmann::json::parse(r.out);  // the results are still printed
  EXPECT_EQ(j["trained"], false);
  EXPECT_GT(2 * j["skipped_steps"].get<int64_t>(), j["steps"].get<int64_t>()) << r.out;
  EXPECT_EQ(r.err.rfind("mixp train: error: the run did not train: the loss scaler skipped ", 0),
            0u)
      << r.err;
  EXPECT_THAT(r.err, HasSubstr("Lower the learning rate (now 1e+06)"));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;

  const CliResult s = run_cli(kIssueRun);  // the summary, then the same line
  EXPECT_EQ(s.exit_code, 1) << s.err;
  EXPECT_THAT(s.out, HasSubstr("trained mlp in fp16"));
  EXPECT_THAT(s.err, HasSubstr("mixp train: error: the run did not train"));
}

}  // namespace
}  // namespace mixp::train
