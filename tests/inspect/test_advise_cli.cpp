// `mixp advise` end to end on a tiny mlp (docs/inspect.md "The advisor"): the statistics run, one
// decision per Linear layer with its numbers, the verification runs against fp32 and bf16, a
// proposal that is one of them, the three symptoms; the same from a statistics file; and bad
// input (a missing or corrupt statistics file, statistics without Linear outputs, a bad reference)
// as usage errors that name what was wrong.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "common/cli_runner.h"

namespace mixp::test {
namespace {

const std::string kModel = "--model mlp --width 64 --data synthetic --train-limit 512 "
                           "--test-limit 256 --batch 64 --threads 1 ";

TEST(AdviseCli, TinyRunGivesADecisionPerLayerAndAVerifiedProposal) {
  const CliResult r =
      run_cli("advise " + kModel + "--stats-steps 2 --inspect-every 1 --steps 4 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  std::set<std::string> layers;
  for (const auto& l : j.at("layers")) {
    layers.insert(l.at("module").get<std::string>());
    EXPECT_FALSE(l.at("rule").get<std::string>().empty());
    EXPECT_TRUE(l.at("numbers").contains("mxfp8_rel_mse"));
    EXPECT_GT(l.at("numbers").at("bf16_rel_mse").get<double>(), 0.0) << l.dump();
  }
  EXPECT_EQ(layers, (std::set<std::string>{"fc1", "fc2", "head"}));
  for (const auto& l : j.at("layers")) {
    if (l.at("module") == "head") {
      EXPECT_EQ(l.at("rule"), "head");
    }
  }
  const auto& runs = j.at("runs");
  ASSERT_GE(runs.size(), 2u);
  EXPECT_EQ(runs[0].at("precision"), "fp32");
  EXPECT_EQ(runs[1].at("precision"), "bf16");
  std::set<std::string> labels;
  for (const auto& v : runs) {
    labels.insert(v.at("label").get<std::string>());
    EXPECT_GT(v.at("ms_per_step").get<double>(), 0.0);
    EXPECT_TRUE(v.at("accuracy").is_number());
    EXPECT_GT(v.at("memory").at("peak_bytes").get<double>(), 0.0);
    EXPECT_GT(v.at("predicted_ms_per_step").get<double>(), 0.0);
    EXPECT_GT(v.at("run_ms_per_step").get<double>(), 0.0);
  }
  // fc1 and fc2 fit fp8 here, so the fp8 proposal was trained.
  EXPECT_EQ(labels.count("proposal: fp8"), 1u) << r.out;
  EXPECT_EQ(runs[2].at("layer_precision"), "head=bf16,*=fp8");
  // Predicted error: the largest relative MSE of the formats given (bf16 < the fp8 policy's).
  EXPECT_EQ(runs[0].at("predicted_rel_mse").get<double>(), 0.0);
  EXPECT_GT(runs[2].at("predicted_rel_mse").get<double>(),
            runs[1].at("predicted_rel_mse").get<double>());
  EXPECT_GT(j.at("gemm_speedup_vs_fp32").at("bf16").get<double>(), 0.0);
  EXPECT_NE(j.at("timing").get<std::string>().find("interleaved rounds"), std::string::npos);
  EXPECT_TRUE(labels.count(j.at("proposal").at("run").get<std::string>()));
  ASSERT_EQ(j.at("symptoms").size(), 3u);
  EXPECT_EQ(j.at("symptoms")[0].get<std::string>().rfind("no speed-up:", 0), 0u);
  EXPECT_EQ(j.at("symptoms")[1].get<std::string>().rfind("no memory saving:", 0), 0u);
  EXPECT_EQ(j.at("symptoms")[2].get<std::string>().rfind("loss NaN:", 0), 0u);
}

TEST(AdviseCli, FromAStatisticsFileAndAsText) {
  const TempDir dir;
  const std::string stats = (dir / "s.jsonl").string();
  ASSERT_EQ(run_cli("train " + kModel + "--steps 2 --no-eval --inspect 'out=" + stats + "'")
                .exit_code,
            0);
  const CliResult r = run_cli("advise " + kModel + "--stats '" + stats + "' --steps 3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("statistics: " + stats), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fits-fp8"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("proposal: --precision "), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("verification: 3 steps each"), std::string::npos) << r.err;
}

TEST(AdviseCli, BadInputIsAUsageErrorThatSaysWhat) {
  const TempDir dir;
  const CliResult missing =
      run_cli("advise " + kModel + "--stats '" + (dir / "none.jsonl").string() + "'");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("none.jsonl"), std::string::npos) << missing.err;
  {
    std::ofstream(dir / "bad.jsonl") << "{\"step\":1}\nnot json\n";
  }
  const CliResult bad =
      run_cli("advise " + kModel + "--stats '" + (dir / "bad.jsonl").string() + "'");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("bad.jsonl"), std::string::npos) << bad.err;
  // Statistics without any Linear layer's output.
  const std::string w = (dir / "w.jsonl").string();
  ASSERT_EQ(run_cli("train " + kModel + "--steps 1 --no-eval --inspect 'roles=weight,out=" + w +
                    "'")
                .exit_code,
            0);
  const CliResult nolin = run_cli("advise " + kModel + "--stats '" + w + "'");
  EXPECT_EQ(nolin.exit_code, 2);
  EXPECT_NE(nolin.err.find("roles=activation"), std::string::npos) << nolin.err;
  const CliResult ref = run_cli("advise " + kModel + "--reference fp16 --steps 2");
  EXPECT_EQ(ref.exit_code, 2);
  EXPECT_NE(ref.err.find("fp32 or a bf16 run"), std::string::npos) << ref.err;
  EXPECT_EQ(run_cli("advise " + kModel + "--steps 1").exit_code, 2);
  EXPECT_EQ(run_cli("advise --help").exit_code, 0);
}

}  // namespace
}  // namespace mixp::test
