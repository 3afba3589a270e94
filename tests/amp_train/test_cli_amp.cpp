// `mixp train` with the mixed-precision recipes: the --json and --log fields, `auto`, policy
// strings, per-layer rules, and the errors for bad recipes, keys and layer names.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "mixp/amp/policy.h"
#include "train/train_test_util.h"

namespace mixp::train {
namespace {

using testing::CliResult;
using ::testing::HasSubstr;
using testing::run_cli;
using testing::TempDir;

const std::string kSmall =
    " --data synthetic --train-limit 256 --test-limit 64 --batch 32 --threads 1";

TEST(CliAmp, Fp16JsonAndLogCarryTheScaleAndSkippedSteps) {
  TempDir dir;
  const std::string log = (dir / "run.jsonl").string();
  const CliResult r = run_cli(
      "train --model mlp --precision fp16 --loss-scale-init 1e30 --steps 6 "
      "--growth-interval 2 --json --log '" +
          log + "'" + kSmall);
  // A scale of 1e30 overflows every step: the run did not train (docs/train.md), so it exits 1
  // after printing its JSON.
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["trained"], false);
  EXPECT_EQ(j["precision"], "fp16");
  EXPECT_GT(j["skipped_steps"].get<int64_t>(), 0);
  EXPECT_EQ(j["skipped_steps_this_run"], j["skipped_steps"]);
  EXPECT_LT(j["loss_scale"].get<double>(), 1e30);
  EXPECT_THAT(j["recipe"].get<std::string>(), HasSubstr("dynamic loss scaling"));
  std::ifstream in(log);
  std::string line;
  int64_t rows = 0, skipped = 0;
  while (std::getline(in, line)) {
    const auto row = nlohmann::json::parse(line);
    for (const char* k :
         {"step", "loss", "loss_scale", "skipped", "skipped_steps", "grad_norm", "lr"})
      EXPECT_TRUE(row.contains(k)) << k;
    skipped += row["skipped"].get<bool>();
    EXPECT_EQ(row["skipped_steps"].get<int64_t>(), skipped);
    ++rows;
  }
  EXPECT_EQ(rows, 6);
  EXPECT_EQ(skipped, j["skipped_steps"].get<int64_t>());
}

TEST(CliAmp, AutoPolicyStringsAndLayerRules) {
  CliResult r = run_cli("train --model mlp --precision auto --steps 2 --json" + kSmall);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["precision"], amp::auto_preset());

  r = run_cli(
      "train --model mlp --precision 'params=float32,compute=bfloat16,output=float32' "
      "--layer-precision head=fp32 --steps 2 --json" +
          kSmall);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["precision"], "fp32:params=float32,compute=bfloat16,output=float32");
  EXPECT_EQ(j["layer_precision"], "head=fp32");
  EXPECT_EQ(j["loss_scale"], 1.0);

  // The summary names the recipe.
  r = run_cli("train --model mlp --precision bf16-pure --steps 2" + kSmall);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("precision: bf16-pure: params bf16 without master weights, "
                               "stochastic write-back"));
}

TEST(CliAmp, ResumeKeepsTheScalerState) {
  TempDir dir;
  const std::string ck = (dir / "ck").string();
  CliResult r = run_cli(
      "train --model mlp --precision fp16 --loss-scale-init 1e30 --steps 4 "
      "--no-eval --save '" +
          ck + "'" + kSmall);
  // Every step skipped: exit 1 (it did not train), but the run finished and saved its state.
  EXPECT_EQ(r.exit_code, 1) << r.err;
  std::ifstream s(dir / "ck" / "state.json");
  std::stringstream ss;
  ss << s.rdbuf();
  const auto state = nlohmann::json::parse(ss.str());
  EXPECT_EQ(state["recipe"]["name"], "fp16");
  EXPECT_TRUE(state["recipe"]["state"].contains("_growth_tracker"));
  EXPECT_LT(state["recipe"]["state"]["scale"].get<double>(), 1e30);
  EXPECT_GT(state["skipped_steps"].get<int64_t>(), 0);
  r = run_cli("train --resume '" + ck + "' --steps 6 --no-eval --json --threads 1");
  EXPECT_EQ(r.exit_code, 1) << r.err;  // its two steps are skipped too
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["steps"], 6);
  EXPECT_GE(j["skipped_steps"].get<int64_t>(), state["skipped_steps"].get<int64_t>());
}

TEST(CliAmp, BadRecipesKeysAndLayersAreOneLineErrors) {
  struct Case {
    std::string args, needle;
  };
  const std::vector<Case> cases = {
      {"--precision bf17", "unknown precision 'bf17'; available: fp64, fp32, tf32, bf16"},
      {"--precision 'bf16:compute=int8'", "policy key 'compute' takes fp64|fp32|tf32|bf16|fp16"},
      {"--precision 'bf16:turbo=on'", "unknown policy key 'turbo'; keys: params, compute"},
      {"--precision 'bf16-pure:kahan=on,master=on'", "kahan=on replaces fp32 master weights"},
      {"--precision bf16 --layer-precision transformer=fp32",
       "'transformer' matches no module of this model; select modules by kind (flatten, head, "
       "linear"},
      {"--precision bf16 --layer-precision head=fp8", "fp32, bf16 or fp16"},
      {"--precision bf16-pure --loss-scale-init 8", "does not scale the loss"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.args);
    const CliResult r = run_cli("train --model mlp " + c.args + kSmall);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr(c.needle));
    EXPECT_EQ(r.err.rfind("mixp train: error: ", 0), 0u);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1);
    EXPECT_TRUE(r.out.empty());
  }
}

}  // namespace
}  // namespace mixp::train
