// `mixp compare` as a user runs it: the files, --json, the progress lines, and bad input (one
// error line, non-zero exit, nothing written).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "train/train_test_util.h"

namespace mixp::study {
namespace {

using train::testing::read_text;
using train::testing::run_cli;
using train::testing::TempDir;

const std::string kTiny =
    "compare --data synthetic --train-limit 256 --test-limit 128 --batch 64 --threads 1 ";

void expect_usage_error(const train::testing::CliResult& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(r.err.rfind("mixp compare: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(CliCompare, WritesTheReportAndPrintsTheTable) {
  TempDir dir;
  const auto out = (dir / "st").string();
  const auto r =
      run_cli(kTiny + "--precisions fp32,fp64 --steps 3 --out '" + out + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* f : {"results.json", "results.csv", "report.md", "report.html"}) {
    EXPECT_TRUE(std::filesystem::exists(dir / "st" / f)) << f;
  }
  EXPECT_NE(r.out.find("precision"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("report: " + out + "/report.html"), std::string::npos) << r.out;
  // Not a terminal: one result line per run on stderr, no bar.
  EXPECT_NE(r.err.find("[1/2] fp32  seed 0: accuracy "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[2/2] fp64  seed 0: accuracy "), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\r'), std::string::npos);

  // Again into the same folder: a previous study is overwritten without --force.
  const auto again =
      run_cli(kTiny + "--precisions fp32 --steps 2 --json --out '" + out + "'");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  const auto j = nlohmann::json::parse(again.out);
  ASSERT_EQ(j["runs"].size(), 1u);
  EXPECT_EQ(j["runs"][0]["steps"], 2);
  EXPECT_EQ(j, nlohmann::json::parse(read_text(dir / "st" / "results.json")))
      << "--json prints results.json's object";
}

TEST(CliCompare, UnknownPrecisionListsTheKnownOnesAndRunsNothing) {
  TempDir dir;
  const auto r =
      run_cli(kTiny + "--precisions fp32,fp17 --out '" + (dir / "x").string() + "'");
  expect_usage_error(r, "unknown precision 'fp17'; known precisions: ");
  EXPECT_NE(r.err.find("fp32"), std::string::npos);
  EXPECT_NE(r.err.find("fp64"), std::string::npos);
  for (const char* p : {"fp8", "fp8-current", "mxfp8", "int8-qat"}) {
    EXPECT_NE(r.err.find(std::string(p) + ","), std::string::npos) << p << ": " << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "x"));
}

// The 8-bit rows as a user asks for them: a line per run, rows in the table (int8-qat marked as
// the int8 model's accuracy), and the runs in results.json.
TEST(CliCompare, Fp8AndInt8QatRowsAppearWhenAsked) {
  TempDir dir;
  const auto out = (dir / "q8").string();
  const auto r = run_cli(
      kTiny + "--precisions fp32,bf16,fp8,int8-qat --steps 3 --out '" + out + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("[3/4] fp8  seed 0: accuracy "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("[4/4] int8-qat  seed 0: accuracy "), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("\nfp8 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nint8-qat* "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("* accuracy of the int8 model converted after training"), std::string::npos)
      << r.out;
  const auto j = nlohmann::json::parse(read_text(dir / "q8" / "results.json"));
  ASSERT_EQ(j["runs"].size(), 4u);
  EXPECT_EQ(j["runs"][2]["precision"], "fp8");
  EXPECT_EQ(j["runs"][3]["precision"], "int8-qat");
  EXPECT_EQ(j["runs"][3]["evaluated_model"], "int8 model converted after training");
}

// Issue 32: the 8-bit and 4-bit recipes side by side, as docs/fp4.md shows the command, on a
// tiny gpt (2 steps, context 16): every run finishes, the table, results.json and both reports
// list all six, and the block-scaled ones get their emulation note.
TEST(CliCompare, EightAndFourBitRecipesSideBySide) {
  TempDir dir;
  const auto out = (dir / "fp4").string();
  const auto r = run_cli(
      "compare --model gpt --data synthetic --train-limit 256 --test-limit 64 --batch 2 "
      "--context 16 --threads 1 --steps 2 --precisions bf16,fp8,fp8-block,mxfp8,nvfp4,mxfp4 "
      "--json --out '" + out + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> six = {"bf16", "fp8", "fp8-block", "mxfp8", "nvfp4", "mxfp4"};
  // Appending piece by piece (GCC 12 warns falsely, -Wrestrict, on chains of string +).
  const auto cat = [](std::initializer_list<std::string_view> parts) {
    std::string out;
    for (std::string_view p : parts) out.append(p);
    return out;
  };
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["runs"].size(), 6u);
  for (size_t i = 0; i < six.size(); ++i) {
    EXPECT_EQ(j["runs"][i]["precision"], six[i]);
    EXPECT_NE(r.err.find(cat({"[", std::to_string(i + 1), "/6] ", six[i], "  seed 0: val loss"})),
              std::string::npos)
        << r.err;
  }
  const std::string md = read_text(dir / "fp4" / "report.md");
  for (const std::string& p : six) {
    EXPECT_NE(md.find(cat({"\n| ", p, " | finished |"})), std::string::npos) << p << "\n" << md;
  }
  EXPECT_NE(md.find("fp8-block, nvfp4, mxfp4: emulated exactly on this CPU"), std::string::npos)
      << md;
  EXPECT_NE(md.find("fp8, mxfp8: this CPU has no FP8 arithmetic"), std::string::npos) << md;
  const std::string html = read_text(dir / "fp4" / "report.html");
  for (const std::string& p : six) EXPECT_NE(html.find(cat({">", p, "<"})), std::string::npos) << p;
}

TEST(CliCompare, RefusesAFolderThatIsNotAStudyUnlessForced) {
  TempDir dir;
  std::filesystem::create_directories(dir / "mine");
  std::ofstream(dir / "mine" / "notes.txt") << "keep me";
  const std::string args =
      kTiny + "--precisions fp32 --steps 2 --out '" + (dir / "mine").string() + "'";
  auto r = run_cli(args);
  expect_usage_error(r, "refusing to write into ");
  EXPECT_NE(r.err.find("it exists and is not a previous mixp study; use --force"),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir / "mine" / "results.json"));
  r = run_cli(args + " --force");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(dir / "mine" / "report.html"));
  EXPECT_EQ(read_text(dir / "mine" / "notes.txt"), "keep me");
}

TEST(CliCompare, BadFlags) {
  TempDir dir;
  expect_usage_error(run_cli(kTiny + "--epochs 1 --steps 2"), "both given");
  expect_usage_error(run_cli(kTiny + "--seeds 0"), "--seeds: must be an integer from 1");
  expect_usage_error(run_cli(kTiny + "--model resnet"), "unknown model 'resnet'");
  EXPECT_FALSE(std::filesystem::exists(dir / "mixp-study"));
}

TEST(CliCompare, EveryRunDivergedIsAnErrorButTheReportIsThere) {
  TempDir dir;
  const auto r = run_cli(
      kTiny + "--precisions fp32 --steps 3 --lr 1e30 --out '" + (dir / "nan").string() + "'");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("[1/1] fp32  seed 0: diverged at step "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no run finished"), std::string::npos) << r.err;
  EXPECT_TRUE(std::filesystem::exists(dir / "nan" / "report.html"));
}

// "Diverged" is the Trainer's "did not train" (docs/train.md): a run whose loss scaler skipped
// every step, with every loss finite, is diverged too, as `mixp train` fails it.
TEST(CliCompare, ARunThatSkippedMostStepsDiverged) {
  TempDir dir;
  const auto r = run_cli(kTiny + "--precisions 'fp16:loss_scale_init=1e30' --steps 3 --out '" +
                         (dir / "skip").string() + "'");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("diverged at step "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no run finished"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace mixp::study
