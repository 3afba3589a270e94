// `mixp train --inspect / --detect-anomaly / --profile` end to end (docs/inspect.md): the
// statistics of a run equal numpy's on the dumped tensors (tests/inspect/check_stats.py, exact
// for every count), the filters select what they say, a too-large fp16 loss scale is named in
// the backward with the loss scaler's verdict, the profile prints its table and a Chrome trace
// whose events sum to the kernels' total, and bad specs are usage errors.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <map>
#include <set>
#include <tuple>

#include "common/cli_runner.h"
#include "common/test_paths.h"

namespace mixp::test {
namespace {

const std::string kRun = "train --model mlp --width 64 --data synthetic --train-limit 512 --batch 64 "
                         "--no-eval --threads 1 ";

std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::vector<nlohmann::json> v;
  for (std::string line; std::getline(in, line);) v.push_back(nlohmann::json::parse(line));
  return v;
}

TEST(InspectCli, StatisticsEqualNumpyOnTheDumpedTensors) {
  const TempDir dir;
  // fp16 with loss scaling: fp16 activations, gradients at scale 65536 (fp8 overflows), tiny
  // optimizer states (underflows).
  // Two micro-batches per step: each module output is recorded twice per step (call 0 and 1).
  const CliResult r = run_cli(kRun + "--steps 2 --grad-accum 2 --precision fp16 --inspect 'out=" +
                              (dir / "s.jsonl").string() + ",dump=" + (dir / "d").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("inspect: "), std::string::npos) << r.out;
  const std::vector<nlohmann::json> recs = read_jsonl(dir / "s.jsonl");
  std::set<std::string> roles;
  for (const auto& j : recs) roles.insert(j.at("role").get<std::string>());
  EXPECT_EQ(roles, (std::set<std::string>{"activation", "activation-grad", "weight", "weight-grad",
                                          "optimizer-state"}));
  const std::string cmd = "/usr/bin/python3 '" + std::string(MIXP_SOURCE_DIR) +
                          "/tests/inspect/check_stats.py' '" + (dir / "s.jsonl").string() + "' '" +
                          (dir / "d").string() + "' > '" + (dir / "py.txt").string() + "' 2>&1";
  const int status = std::system(cmd.c_str());
  EXPECT_EQ(status, 0) << read_text(dir / "py.txt");
  EXPECT_NE(read_text(dir / "py.txt").find("OK"), std::string::npos) << read_text(dir / "py.txt");
}

TEST(InspectCli, CheckpointedGptRecordsEachOutputOncePerMicroBatch) {
  const TempDir dir;
  const CliResult r = run_cli(
      "train --model gpt --layers 1 --width 32 --heads 2 --context 16 --batch 4 --train-limit 4000 "
      "--no-eval --threads 1 --steps 2 --grad-accum 2 --checkpointing --inspect 'formats=fp16,"
      "roles=activation+activation-grad,out=" + (dir / "g.jsonl").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<std::tuple<int64_t, std::string, std::string, int64_t>, int> seen;
  std::map<std::string, int> per_role;
  for (const auto& j : read_jsonl(dir / "g.jsonl")) {
    ++seen[{j["step"], j["module"], j["role"], j["call"]}];
    ++per_role[j["role"]];
  }
  for (const auto& [k, n] : seen) EXPECT_EQ(n, 1) << std::get<1>(k) << " " << std::get<2>(k);
  // The recomputation in backward records nothing of its own; each activation has its gradient.
  EXPECT_EQ(per_role["activation"], per_role["activation-grad"]);
  EXPECT_TRUE(seen.count({2, "blocks.0.mlp", "activation", 1})) << "the second micro-batch";
}

TEST(InspectCli, FiltersSelectStepsModulesRolesAndFormats) {
  const TempDir dir;
  const CliResult r =
      run_cli(kRun + "--steps 4 --inspect 'every=2,start=1,end=3,modules=fc*,roles=weight+"
                     "weight-grad,formats=fp8_e4m3,out=" + (dir / "s.jsonl").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<nlohmann::json> recs = read_jsonl(dir / "s.jsonl");
  ASSERT_FALSE(recs.empty());
  std::set<int64_t> steps;
  for (const auto& j : recs) {
    steps.insert(j.at("step").get<int64_t>());
    EXPECT_EQ(j["module"].get<std::string>().rfind("fc", 0), 0u) << j;
    const std::string role = j["role"];
    EXPECT_TRUE(role == "weight" || role == "weight-grad") << j;
    EXPECT_EQ(j["formats"].size(), 1u);
    EXPECT_TRUE(j["formats"].contains("fp8_e4m3"));
    EXPECT_EQ(j["loss_scale"], 1.0);
  }
  EXPECT_EQ(steps, (std::set<int64_t>{1, 3}));
}

TEST(InspectCli, TooLargeFp16LossScaleIsNamedInTheBackward) {
  const CliResult r =
      run_cli(kRun + "--steps 3 --precision fp16 --loss-scale-init 1e30 --detect-anomaly");
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.err.find("detect-anomaly: step 1, backward pass"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("inf"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("loss scaler would have skipped step 1 anyway"), std::string::npos) << r.err;
  // A healthy run is not stopped.
  const CliResult ok = run_cli(kRun + "--steps 2 --precision bf16 --detect-anomaly");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

// Issue 28: with --lr 1e6 AdamW's update overflows exp_avg_sq before any kernel writes an inf;
// --detect-anomaly used to name the next step's forward matmul instead.
TEST(InspectCli, AnOptimizerUpdateThatOverflowsIsNamed) {
  for (const char* in_backward : {"", "--optimizer-in-backward"}) {
    SCOPED_TRACE(in_backward);
    const CliResult r =
        run_cli(kRun + "--lr 1e6 --steps 50 --detect-anomaly " + std::string(in_backward));
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_NE(r.err.find(", optimizer: the adamw update wrote "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("into exp_avg_sq of parameter "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("lower the learning rate (now 1e+06)"), std::string::npos) << r.err;
  }
}

TEST(InspectCli, ProfileTableAndChromeTrace) {
  const TempDir dir;
  const CliResult r = run_cli(kRun + "--steps 3 --precision bf16 --profile-trace '" +
                              (dir / "t.json").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("op "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fp32->bf16"), std::string::npos) << "casts are rows: " << r.out;
  EXPECT_NE(r.out.find("fp32 kernels"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("optimizer states"), std::string::npos) << "memory breakdown: " << r.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex("kernels and spans ([0-9.]+) ms: forward")))
      << r.out;
  const double total_ms = std::stod(m[1]);
  std::ifstream in(dir / "t.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  double dur_ms = 0;
  std::set<std::string> phases;
  for (const auto& e : j.at("traceEvents")) {
    dur_ms += e.at("dur").get<double>() * 1e-3;
    phases.insert(e.at("cat").get<std::string>());
  }
  EXPECT_NEAR(dur_ms, total_ms, 0.051 + 1e-3 * total_ms);
  EXPECT_TRUE(phases.count("forward") && phases.count("backward") && phases.count("optimizer"))
      << j["traceEvents"].size();
}

TEST(InspectCli, BadSpecsAreUsageErrors) {
  CliResult r = run_cli(kRun + "--steps 1 --inspect every=0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("every"), std::string::npos) << r.err;
  r = run_cli(kRun + "--steps 1 --inspect roles=gradients");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("activation-grad"), std::string::npos) << r.err;
  r = run_cli(kRun + "--steps 1 --inspect out=/nonexistent/dir/x.jsonl");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("cannot open"), std::string::npos) << r.err;
  r = run_cli(kRun + "--steps 1 --profile-trace /nonexistent/dir/t.json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("does not exist"), std::string::npos) << r.err;
  EXPECT_EQ(run_cli("train --help").out.find("--detect-anomaly") != std::string::npos, true);
  EXPECT_EQ(run_cli("inspect report --help").exit_code, 0);
  EXPECT_EQ(run_cli("inspect").exit_code, 2);
}

TEST(InspectCli, ReportRendersEveryRoleAndFormat) {
  const TempDir dir;
  const std::string jsonl = (dir / "s.jsonl").string(), html = (dir / "r.html").string();
  ASSERT_EQ(run_cli(kRun + "--steps 3 --precision fp16 --inspect 'every=2,formats=fp16+fp8_e4m3,"
                           "out=" + jsonl + "'").exit_code, 0);
  const CliResult r = run_cli("inspect report '" + jsonl + "' -o '" + html + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string page = read_text(html);
  // Two formats x five roles of heatmaps, each with the two inspected steps as columns.
  size_t heat = 0;
  for (size_t p = page.find("class=\"heat\""); p != std::string::npos;
       p = page.find("class=\"heat\"", p + 1))
    ++heat;
  EXPECT_EQ(heat, 10u);
  EXPECT_NE(page.find("<th>step 3</th>"), std::string::npos);
  EXPECT_NE(page.find("fp8_e4m3 &middot; weight-grad"), std::string::npos);
  // Bad inputs: a missing file, a line that is not a record.
  EXPECT_EQ(run_cli("inspect report '" + (dir / "none.jsonl").string() + "'").exit_code, 2);
  {
    std::ofstream bad(dir / "bad.jsonl");
    bad << "{\"step\": 1}\n";
  }
  const CliResult b = run_cli("inspect report '" + (dir / "bad.jsonl").string() + "' -o '" +
                              (dir / "b.html").string() + "'");
  EXPECT_EQ(b.exit_code, 2);
  EXPECT_NE(b.err.find("line 1"), std::string::npos) << b.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "b.html"));
}

}  // namespace
}  // namespace mixp::test
