// bench/block_accuracy.sh and bench/block_accuracy_summary.py, issue 32's accuracy study
// (docs/fp4.md "Accuracy"): the summary's arithmetic and verdicts on hand-made result files, and
// the driver end to end on a tiny shape (2 steps, 1 seed), so that neither rots silently.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "common/cli_runner.h"
#include "common/temp_dir.h"
#include "common/test_paths.h"

namespace {

using mixp::test::run_shell;
using mixp::test::TempDir;
using mixp::test::write_text;

std::string summary_cmd(const std::filesystem::path& out, const std::string& extra = "") {
  return std::string("/usr/bin/python3 '") + MIXP_SOURCE_DIR +
         "/bench/block_accuracy_summary.py' '" + out.string() + "'" + extra;
}

void result(const TempDir& d, const std::string& config, int seed, const std::string& val_loss,
            const std::string& final_loss = "2.0") {
  write_text(d / (config + ".s" + std::to_string(seed) + ".json"),
             R"({"precision": ")" + config + R"(", "val_loss": )" + val_loss +
                 R"(, "final_loss": )" + final_loss + R"(, "ms_per_step": 10.0})");
}

const nlohmann::json& row(const nlohmann::json& j, const std::string& config) {
  for (const auto& r : j["rows"]) {
    if (r["config"] == config) return r;
  }
  ADD_FAILURE() << "no row " << config;
  static const nlohmann::json none;
  return none;
}

TEST(BlockAccuracy, SummaryMeansRatiosBarsAndDivergence) {
  TempDir d;
  write_text(d / "study.json",
             R"({"configs": "bf16 fp8-block nvfp4 mxfp4 nvfp4-no-sr nvfp4-no-rht nvfp4-no-2d"})");
  result(d, "bf16", 0, "2.0");
  result(d, "bf16", 1, "2.2");
  result(d, "fp8-block", 0, "2.1");   // mean 2.105: 1.0024x bf16's 2.1, inside 0.5%
  result(d, "fp8-block", 1, "2.11");
  result(d, "nvfp4", 0, "2.15");      // mean 2.15: 1.0238x, outside 1.5%
  result(d, "nvfp4", 1, "2.15");
  result(d, "mxfp4", 0, "null");      // a NaN loss is written as null
  write_text(d / "mxfp4.s1.err", "mixp train: error: ...\n");  // failed, no result
  result(d, "nvfp4-no-sr", 0, "2.3", "null");  // finite val_loss but non-finite training loss
  result(d, "nvfp4-no-sr", 1, "2.3");
  result(d, "nvfp4-no-rht", 0, "2.2");
  result(d, "nvfp4-no-rht", 1, "2.2");
  result(d, "nvfp4-no-2d", 0, "2.2");  // an ablation: 2.2 / 2.15 of the full recipe
  result(d, "nvfp4-no-2d", 1, "2.2");
  write_text(d / "nvfp4-no-rht.s2.err", "");  // a run in progress: neither failed nor counted
  write_text(d / "nvfp4-no-rht.s2.json.tmp", "");

  const auto r = run_shell(summary_cmd(d.path(), " --json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["rows"].size(), 7u);
  EXPECT_EQ(j["rows"][0]["config"], "bf16");  // the order of study.json
  EXPECT_EQ(j["rows"][4]["config"], "nvfp4-no-sr");

  const auto& b = row(j, "bf16");
  EXPECT_NEAR(b["mean"].get<double>(), 2.1, 1e-12);
  EXPECT_NEAR(b["std"].get<double>(), 0.141421356, 1e-8);  // sample std of 2.0, 2.2
  EXPECT_DOUBLE_EQ(b["ratio"].get<double>(), 1.0);
  const auto& f = row(j, "fp8-block");
  EXPECT_NEAR(f["ratio"].get<double>(), 2.105 / 2.1, 1e-12);
  EXPECT_EQ(f["verdict"], "pass");
  EXPECT_EQ(f["overlaps_bf16"], true);
  // Paired: seed 0 over bf16's seed 0 (2.1 / 2.0), seed 1 over bf16's seed 1 (2.11 / 2.2).
  EXPECT_NEAR(f["paired_ratios"]["0"].get<double>(), 2.1 / 2.0, 1e-12);
  EXPECT_NEAR(f["paired_ratios"]["1"].get<double>(), 2.11 / 2.2, 1e-12);
  EXPECT_NEAR(f["paired_mean"].get<double>(), (2.1 / 2.0 + 2.11 / 2.2) / 2, 1e-12);
  EXPECT_NEAR(f["paired_min"].get<double>(), 2.11 / 2.2, 1e-12);
  const auto& n = row(j, "nvfp4");
  EXPECT_NEAR(n["ratio"].get<double>(), 2.15 / 2.1, 1e-12);
  EXPECT_EQ(n["verdict"], "fail");
  const auto& m = row(j, "mxfp4");
  EXPECT_EQ(m["diverged_seeds"], nlohmann::json::array({0}));
  EXPECT_EQ(m["failed_seeds"], nlohmann::json::array({1}));
  EXPECT_TRUE(m["mean"].is_null());  // no mean over the seeds that survived
  EXPECT_TRUE(m["paired_mean"].is_null());
  const auto& s = row(j, "nvfp4-no-sr");
  EXPECT_EQ(s["diverged_seeds"], nlohmann::json::array({0}));
  EXPECT_TRUE(s["mean"].is_null());
  EXPECT_FALSE(s["min"].is_null());
  EXPECT_TRUE(s["ratio_to_full"].is_null());
  const auto& h = row(j, "nvfp4-no-rht");
  EXPECT_EQ(h["ablation_of"], "nvfp4");
  EXPECT_EQ(h["running_seeds"], nlohmann::json::array({2}));
  EXPECT_EQ(h["failed_seeds"], nlohmann::json::array());
  EXPECT_TRUE(h["mean"].is_null());  // not until every seed is in
  EXPECT_EQ(h["losses"].size(), 2u);
  const auto& t2 = row(j, "nvfp4-no-2d");
  EXPECT_EQ(t2["ablation_of"], "nvfp4");
  EXPECT_NEAR(t2["ratio_to_full"].get<double>(), 2.2 / 2.15, 1e-12);
  EXPECT_EQ(t2["overlaps_bf16"], true);  // 2.2 is bf16's max
  EXPECT_TRUE(n["ratio_to_full"].is_null());
  EXPECT_EQ(n["overlaps_bf16"], true);
  // Paired standard errors: fp8-block's ratios 1.05 and 0.9591 are 0.0455 apart, so the standard
  // error of their mean is 0.0227 and the 0.45% difference from 1 is not resolved; the ablation's
  // 2.2 / 2.15 on both seeds has no spread, so its 2.3% effect over the full recipe is.
  const double r0 = 2.1 / 2.0, r1 = 2.11 / 2.2;
  EXPECT_NEAR(f["paired_se"].get<double>(), std::abs(r0 - r1) / 2, 1e-12);
  EXPECT_EQ(f["paired_resolved"], false);
  EXPECT_TRUE(f["paired_to_full_mean"].is_null());  // not an ablation
  EXPECT_NEAR(t2["paired_to_full_mean"].get<double>(), 2.2 / 2.15, 1e-12);
  EXPECT_NEAR(t2["paired_to_full_se"].get<double>(), 0.0, 1e-12);
  EXPECT_EQ(t2["paired_to_full_resolved"], true);
  EXPECT_TRUE(m["paired_se"].is_null());  // no seed survived

  const auto t = run_shell(summary_cmd(d.path()));
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.out.find("diverged: seeds 0; failed: seeds 1"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("1.0238"), std::string::npos) << t.out;
}

TEST(BlockAccuracy, DriverRunsEveryConfigurationAndResumes) {
  TempDir d;
  const std::string env = std::string("MIXP='") + MIXP_CLI +
                          "' STEPS=2 SEEDS=0 BATCH=2 CONTEXT=16 WIDTH=32 LAYERS=2 HEADS=2 "
                          "WARMUP=1 TEST_LIMIT=4 JOBS=2 THREADS=1 DATA=/usr/share/games/fortunes ";
  const std::string cmd = env + "bash '" + MIXP_SOURCE_DIR + "/bench/block_accuracy.sh' '" +
                          (d / "out").string() + "'";
  const auto r = run_shell(cmd);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_EQ(r.err, "");
  for (const char* c : {"bf16", "fp8-block", "nvfp4", "nvfp4-no-rht", "nvfp4-no-2d",
                        "nvfp4-no-sr", "nvfp4-no-bf16", "mxfp4", "mxfp4-no-rht-sr"}) {
    EXPECT_TRUE(std::filesystem::exists(d / "out" / (std::string(c) + ".s0.json"))) << c;
    EXPECT_FALSE(std::filesystem::exists(d / "out" / (std::string(c) + ".s0.err"))) << c;
    const std::string line = std::string("\n").append(c).append(" ");
    EXPECT_NE(r.out.find(line), std::string::npos) << r.out;
  }
  // Each configuration ran the recipe it names.
  const auto j = nlohmann::json::parse(run_shell(summary_cmd(d / "out", " --json")).out);
  EXPECT_EQ(row(j, "nvfp4-no-2d")["precision"], "nvfp4:2d=0,bf16_last=1");
  EXPECT_EQ(row(j, "mxfp4-no-rht-sr")["precision"], "mxfp4:rht=0,sr=0,bf16_last=1");
  EXPECT_EQ(row(j, "bf16")["losses"].size(), 1u);
  // "No bf16 layers": no bf16 block and the head in nvfp4 too.
  EXPECT_EQ(row(j, "nvfp4-no-bf16")["precision"], "nvfp4:bf16_last=0");
  EXPECT_EQ(row(j, "nvfp4-no-bf16")["layer_precision"], "head=nvfp4,*=nvfp4");
  EXPECT_TRUE(row(j, "nvfp4")["layer_precision"].is_null());

  // Resumable: an existing result is kept, a missing one is run again.
  write_text(d / "out" / "bf16.s0.json",
             R"({"precision": "bf16", "val_loss": 1.5, "final_loss": 1.5})");
  std::filesystem::remove(d / "out" / "mxfp4.s0.json");
  const auto again = run_shell(cmd);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.out.find("1.5000..1.5000"), std::string::npos) << again.out;
  EXPECT_TRUE(std::filesystem::exists(d / "out" / "mxfp4.s0.json"));
}

}  // namespace
