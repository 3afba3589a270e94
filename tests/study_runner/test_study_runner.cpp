// run_study on tiny configurations: the files and their schema, reproducibility from the seed,
// divergence reported without stopping the study, the output-folder rules, precision checks.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "mixp/study/report.h"
#include "mixp/study/study_runner.h"
#include "mixp/train/recipe.h"
#include "mixp/train/recipe_registry.h"
#include "train/train_test_util.h"

namespace mixp::study {
namespace {

using train::testing::read_text;
using train::testing::TempDir;

StudyConfig tiny(const std::vector<std::string>& precisions) {
  StudyConfig c;
  c.base.model.name = "mlp";
  c.base.model.width = 64;
  c.base.data = "synthetic";
  c.base.train_limit = 512;
  c.base.test_limit = 256;
  c.base.batch = 64;
  c.base.epochs = 1;  // 8 steps
  c.base.threads = 1;
  c.base.seed = 3;
  c.precisions = precisions;
  return c;
}

TEST(StudyRunner, WritesTheFourFilesWithTheSchema) {
  TempDir dir;
  StudyConfig c = tiny({"fp32", "fp64"});
  c.out_dir = dir / "study";
  int begins = 0, steps = 0, ends = 0;
  const StudyOutcome o = run_study(c, [&](const StudyEvent& e) {
    EXPECT_EQ(e.run_count, 2);
    if (e.kind == StudyEvent::Kind::run_begin) ++begins;
    if (e.kind == StudyEvent::Kind::step) ++steps;
    if (e.kind == StudyEvent::Kind::run_end) {
      ++ends;
      ASSERT_NE(e.record, nullptr);
      EXPECT_EQ(e.record->precision, e.precision);
    }
  });
  EXPECT_EQ(begins, 2);
  EXPECT_EQ(steps, 16);
  EXPECT_EQ(ends, 2);
  EXPECT_TRUE(o.any_finished);
  for (const char* f : {"results.json", "results.csv", "report.md", "report.html"}) {
    EXPECT_TRUE(std::filesystem::exists(dir / "study" / f)) << f;
  }
  const auto j = nlohmann::json::parse(read_text(dir / "study" / "results.json"));
  EXPECT_EQ(j["model"], "mlp");
  EXPECT_EQ(j["baseline"], "fp32");
  for (const char* k : {"machine", "criteria", "verdicts", "recommendation", "summary"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
  ASSERT_EQ(j["runs"].size(), 2u);
  for (const auto& r : j["runs"]) {
    for (const char* k :
         {"model", "precision", "steps", "skipped_steps", "ms_per_step", "samples_per_s",
          "test_accuracy", "final_loss", "peak_memory_bytes", "peak_rss_bytes", "energy_joules",
          "energy_source", "train_time_s", "loss_curve", "loss_scale_trace", "threads",
          "energy_estimate_joules", "estimate_per_step"}) {
      EXPECT_TRUE(r.contains(k)) << k;
    }
    EXPECT_EQ(r["steps"], 8);
    EXPECT_EQ(r["seed"], 3);
    EXPECT_EQ(r["loss_curve"].size(), 8u);
    EXPECT_TRUE(r["loss_scale_trace"].empty()) << "fp32/fp64 have no loss scale";
    EXPECT_GT(r["peak_rss_bytes"].get<double>(), 0);
    const std::string src = r["energy_source"];
    EXPECT_TRUE(src == "estimate" || src == "rapl") << src;
    // The estimate is the per-step count times the steps done.
    EXPECT_NEAR(r["energy_estimate_joules"].get<double>(),
                8 * r["estimate_per_step"]["joules"].get<double>(), 1e-12);
    if (src == "estimate") {
      EXPECT_EQ(r["energy_joules"], r["energy_estimate_joules"]);
    }
  }
  EXPECT_EQ(j["runs"][0]["estimate_per_step"]["compute_dtype"], "fp32");
  EXPECT_EQ(j["runs"][1]["estimate_per_step"]["compute_dtype"], "fp64");
  EXPECT_GT(j["runs"][1]["energy_estimate_joules"].get<double>(),
            j["runs"][0]["energy_estimate_joules"].get<double>())
      << "fp64 moves twice the bytes and its multiply-adds cost more";

  // The speed verdict's timing rounds (docs/study.md, "Timing in rounds"): both precisions, one
  // time per round each, and the verdict's speed-up range from them.
  const auto& tm = j["timing"];
  const int rounds = tm["rounds"].get<int>();
  EXPECT_GE(rounds, 3) << tm.dump();
  EXPECT_GE(tm["steps_per_round"].get<int>(), 1);
  ASSERT_EQ(tm["precisions"].size(), 2u) << tm.dump();
  for (const auto& p : tm["precisions"]) {
    EXPECT_EQ(p["round_ms"].size(), size_t(rounds));
    EXPECT_GT(p["min_ms"].get<double>(), 0);
    EXPECT_LE(p["min_ms"].get<double>(), p["median_ms"].get<double>());
    EXPECT_LE(p["median_ms"].get<double>(), p["max_ms"].get<double>());
  }
  const auto& fp64 = j["verdicts"][1];
  EXPECT_EQ(fp64["speed_rounds"], rounds);
  EXPECT_LE(fp64["speedup_min"].get<double>(), fp64["speedup"].get<double>());
  EXPECT_LE(fp64["speedup"].get<double>(), fp64["speedup_max"].get<double>());
  const std::string check = fp64["checks"]["speedup"];
  EXPECT_TRUE(check == "pass" || check == "fail" || check == "inconclusive") << check;

  const std::string csv = read_text(dir / "study" / "results.csv");
  const std::string header = csv.substr(0, csv.find('\n'));
  std::string expected;
  for (const auto& col : results_csv_columns()) expected += (expected.empty() ? "" : ",") + col;
  EXPECT_EQ(header, expected);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 3);
  const std::string html = read_text(dir / "study" / "report.html");
  if (j["runs"][0]["energy_source"] == "estimate") {
    EXPECT_NE(html.find("(estimate)"), std::string::npos);
  }

  // A previous study may be overwritten without --force.
  EXPECT_NO_THROW(check_output_dir(dir / "study", false));
  EXPECT_TRUE(is_previous_study(dir / "study"));
}

TEST(StudyRunner, ReproducibleFromItsSeed) {
  const StudyOutcome a = run_study(tiny({"fp32"}));
  const StudyOutcome b = run_study(tiny({"fp32"}));
  ASSERT_EQ(a.results.runs.size(), 1u);
  const RunRecord& x = a.results.runs[0];
  const RunRecord& y = b.results.runs[0];
  ASSERT_TRUE(x.test_accuracy && y.test_accuracy);
  EXPECT_EQ(*x.test_accuracy, *y.test_accuracy);
  EXPECT_EQ(x.final_loss, y.final_loss);
  EXPECT_EQ(x.loss_curve, y.loss_curve);
  EXPECT_EQ(x.energy_joules, y.energy_joules);

  StudyConfig other = tiny({"fp32"});
  other.base.seed = 4;
  const StudyOutcome c = run_study(other);
  EXPECT_NE(c.results.runs[0].loss_curve, x.loss_curve) << "another seed, another run";
}

// The low-precision recipes are as reproducible as fp32: FP8's delayed-scaling history and
// int8-qat's observers are part of the run, started fresh from the seed each time.
TEST(StudyRunner, Fp8AndInt8QatAreReproducibleFromTheSeed) {
  const StudyOutcome a = run_study(tiny({"fp8", "int8-qat"}));
  const StudyOutcome b = run_study(tiny({"fp8", "int8-qat"}));
  ASSERT_EQ(a.results.runs.size(), 2u);
  ASSERT_EQ(b.results.runs.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const RunRecord& x = a.results.runs[i];
    const RunRecord& y = b.results.runs[i];
    SCOPED_TRACE(x.precision);
    ASSERT_FALSE(x.diverged || x.error);
    ASSERT_TRUE(x.test_accuracy && y.test_accuracy);
    EXPECT_EQ(*x.test_accuracy, *y.test_accuracy);
    EXPECT_EQ(x.final_loss, y.final_loss);
    EXPECT_EQ(x.loss_curve, y.loss_curve);
    EXPECT_EQ(x.energy_joules, y.energy_joules);
  }
}

// fp8 and int8 rows beside fp32: each run is there with its own energy count (fp8 products
// priced as fp8 multiply-adds, int8-qat's fake-quantized training as fp32), int8-qat says which
// model its accuracy is of, and the files carry the new fields and notes.
TEST(StudyRunner, Fp8AndInt8QatRowsWithTheirEnergyAndNotes) {
  TempDir dir;
  StudyConfig c = tiny({"fp32", "bf16", "fp8", "int8-qat"});
  c.out_dir = dir / "q";
  const StudyOutcome o = run_study(c);
  ASSERT_EQ(o.results.runs.size(), 4u);
  for (const RunRecord& r : o.results.runs) {
    EXPECT_FALSE(r.diverged || r.error) << r.precision;
    EXPECT_TRUE(r.test_accuracy.has_value()) << r.precision;
  }
  const auto j = nlohmann::json::parse(read_text(dir / "q" / "results.json"));
  ASSERT_EQ(j["runs"].size(), 4u);
  ASSERT_EQ(j["verdicts"].size(), 4u);
  const auto& fp32 = j["runs"][0];
  const auto& bf16 = j["runs"][1];
  const auto& fp8 = j["runs"][2];
  const auto& qat = j["runs"][3];
  EXPECT_EQ(fp8["precision"], "fp8");
  EXPECT_EQ(qat["precision"], "int8-qat");
  EXPECT_EQ(fp8["estimate_per_step"]["compute_dtype"], "fp8_e4m3");
  EXPECT_TRUE(fp8["estimate_per_step"]["macs"].contains("fp8"));
  EXPECT_EQ(fp8["estimate_per_step"]["macs"]["fp8"], fp32["estimate_per_step"]["macs"]["fp32"])
      << "the same products, priced in another format";
  EXPECT_EQ(qat["estimate_per_step"]["compute_dtype"], "fp32");
  const double e32 = fp32["energy_estimate_joules"], e16 = bf16["energy_estimate_joules"],
               e8 = fp8["energy_estimate_joules"], eq = qat["energy_estimate_joules"];
  EXPECT_LT(e8, e32);
  EXPECT_LT(e16, e32);
  EXPECT_DOUBLE_EQ(eq, e32) << "fake quantization trains in fp32";
  for (const auto& r : j["runs"]) {
    if (r["energy_source"] == "estimate") {
      EXPECT_EQ(r["energy_joules"], r["energy_estimate_joules"]);
    }
  }
  // int8-qat: the accuracy is the converted int8 model's; the fake-quantized one is beside it.
  EXPECT_EQ(qat["evaluated_model"], "int8 model converted after training");
  EXPECT_TRUE(qat["fake_quant_accuracy"].is_number());
  EXPECT_FALSE(fp8.contains("evaluated_model"));
  EXPECT_TRUE(fp8["recipe"].get<std::string>().find("E4M3") != std::string::npos);
  for (const auto& v : j["verdicts"]) EXPECT_EQ(v["checks"]["no_nan"], "pass");

  // results.csv: the study's extra columns.
  const std::string csv = read_text(dir / "q" / "results.csv");
  std::vector<std::string> lines;
  for (size_t p = 0, q; p < csv.size(); p = q + 1) {
    q = csv.find('\n', p);
    lines.push_back(csv.substr(p, q - p));
  }
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_NE(lines[0].find(",energy_estimate_joules,estimate_compute_dtype,evaluated_model"),
            std::string::npos);
  EXPECT_NE(lines[3].find(",fp8_e4m3,"), std::string::npos) << lines[3];
  EXPECT_NE(lines[4].find(",fp32,int8 model converted after training"), std::string::npos)
      << lines[4];

  // The notes say what fp8 and int8-qat are on this machine, in both reports.
  for (const char* f : {"report.md", "report.html"}) {
    const std::string t = read_text(dir / "q" / f);
    EXPECT_NE(t.find("this CPU has no FP8 arithmetic"), std::string::npos) << f;
    EXPECT_NE(t.find("accuracy is that of the int8 model converted after training"),
              std::string::npos)
        << f;
    EXPECT_NE(t.find("One seed per precision"), std::string::npos) << f;
  }
  EXPECT_NE(
      read_text(dir / "q" / "report.html").find("<small class=\"model-note\">int8 model</small>"),
      std::string::npos);
  const std::string table = format_study_table(o.results);
  EXPECT_NE(table.find("int8-qat*"), std::string::npos) << table;
  EXPECT_NE(table.find("* accuracy of the int8 model"), std::string::npos) << table;
}

TEST(StudyRunner, SeedsGiveOneRecordPerSeedAndAggregateInTheReport) {
  TempDir dir;
  StudyConfig c = tiny({"fp32"});
  c.base.epochs = 0;
  c.base.steps = 3;
  c.seeds = 2;
  c.out_dir = dir / "s";
  const StudyOutcome o = run_study(c);
  ASSERT_EQ(o.results.runs.size(), 2u);
  EXPECT_EQ(o.results.runs[0].seed, 3u);
  EXPECT_EQ(o.results.runs[1].seed, 4u);
  const auto j = nlohmann::json::parse(read_text(dir / "s" / "results.json"));
  ASSERT_EQ(j["runs"].size(), 1u);
  EXPECT_EQ(j["runs"][0]["num_seeds"], 2);
  EXPECT_EQ(j["seed_runs"].size(), 2u);
  EXPECT_TRUE(j["runs"][0].contains("std"));
  EXPECT_EQ(read_text(dir / "s" / "report.md").find("One seed per precision"), std::string::npos);
}

TEST(StudyRunner, ADivergingRunIsReportedAndTheStudyGoesOn) {
  TempDir dir;
  StudyConfig c = tiny({"fp32", "fp64"});
  // Adam moves every weight by about lr per step, so with lr 1e9 the weights grow by about 1e9
  // per step and the logits by far more: within 8 steps they pass fp32's 3.4e38 (measured: NaN
  // at step 2 or 3) but stay far below fp64's 1.8e308 (measured: loss about 1e159 at step 8).
  c.base.lr = 1e9;
  c.out_dir = dir / "d";
  const StudyOutcome o = run_study(c);
  ASSERT_EQ(o.results.runs.size(), 2u);
  const RunRecord& fp32 = o.results.runs[0];
  EXPECT_TRUE(fp32.diverged);
  ASSERT_TRUE(fp32.diverged_at_step.has_value());
  EXPECT_GE(*fp32.diverged_at_step, 1);
  EXPECT_LE(*fp32.diverged_at_step, 8);
  EXPECT_EQ(fp32.steps, *fp32.diverged_at_step - 1);
  EXPECT_FALSE(fp32.error);
  EXPECT_TRUE(std::isnan(fp32.final_loss));
  const RunRecord& fp64 = o.results.runs[1];
  EXPECT_FALSE(fp64.diverged) << "fp64's range holds what fp32's does not";
  EXPECT_EQ(fp64.steps, 8);
  EXPECT_TRUE(o.any_finished);
  const std::string md = read_text(dir / "d" / "report.md");
  EXPECT_NE(md.find("diverged at step " + std::to_string(*fp32.diverged_at_step)),
            std::string::npos);
  const auto j = nlohmann::json::parse(read_text(dir / "d" / "results.json"));
  EXPECT_EQ(j["runs"][0]["diverged"], true);
  EXPECT_TRUE(j["runs"][0]["final_loss"].is_null());
  EXPECT_NE(j["runs"][0]["diverged_reason"].get<std::string>().find("NaN"), std::string::npos);
}

// The same forced divergence in the FP8 and int8 recipes: reported per run, the study goes on.
TEST(StudyRunner, DivergingFp8AndInt8QatRunsAreReportedAndTheStudyGoesOn) {
  TempDir dir;
  StudyConfig c = tiny({"fp8", "int8-qat", "fp64"});
  c.base.lr = 1e9;  // as above: far past fp32's range within 8 steps, not fp64's
  c.out_dir = dir / "d8";
  const StudyOutcome o = run_study(c);
  ASSERT_EQ(o.results.runs.size(), 3u);
  EXPECT_TRUE(o.any_finished);
  const std::string md = read_text(dir / "d8" / "report.md");
  const auto j = nlohmann::json::parse(read_text(dir / "d8" / "results.json"));
  for (size_t i = 0; i < 2; ++i) {
    const RunRecord& r = o.results.runs[i];
    SCOPED_TRACE(r.precision);
    EXPECT_TRUE(r.diverged);
    EXPECT_FALSE(r.error);
    ASSERT_TRUE(r.diverged_at_step.has_value());
    EXPECT_NE(md.find("diverged at step " + std::to_string(*r.diverged_at_step)),
              std::string::npos);
    EXPECT_EQ(j["verdicts"][i]["checks"]["no_nan"], "fail");
  }
  EXPECT_FALSE(o.results.runs[2].diverged);
  EXPECT_EQ(o.results.runs[2].steps, 8);
}

TEST(StudyRunner, AllRunsDivergedStillWritesTheReport) {
  TempDir dir;
  StudyConfig c = tiny({"fp32"});
  c.base.lr = 1e30;
  c.out_dir = dir / "all";
  const StudyOutcome o = run_study(c);
  EXPECT_FALSE(o.any_finished);
  EXPECT_TRUE(std::filesystem::exists(dir / "all" / "report.html"));
}

TEST(StudyRunner, ARunThatCannotStartIsReportedAsFailed) {
  TempDir dir;
  StudyConfig c = tiny({"fp64"});
  c.base.layer_precision = "head=fp32";  // fp64 takes no per-layer rules: the recipe refuses
  c.out_dir = dir / "f";
  const StudyOutcome o = run_study(c);
  ASSERT_EQ(o.results.runs.size(), 1u);
  const RunRecord& r = o.results.runs[0];
  ASSERT_TRUE(r.error.has_value());
  EXPECT_FALSE(r.diverged);
  EXPECT_FALSE(o.any_finished);
  EXPECT_NE(read_text(dir / "f" / "report.md").find("failed"), std::string::npos);
}

TEST(StudyRunner, PrecisionChecks) {
  try {
    check_precisions({"fp32", "fp99"});
    FAIL() << "fp99 accepted";
  } catch (const train::ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("unknown precision 'fp99'"), std::string::npos) << m;
    for (const auto& p : train::available_recipes()) EXPECT_NE(m.find(p), std::string::npos) << m;
  }
  EXPECT_THROW(check_precisions({"fp32", "fp32"}), train::ConfigError);
  EXPECT_THROW(check_precisions({}), train::ConfigError);
  EXPECT_NO_THROW(check_precisions(train::available_recipes()));
  for (const auto& p : train::planned_recipes()) {
    const auto have = train::available_recipes();
    if (std::find(have.begin(), have.end(), p) != have.end()) continue;
    try {
      check_precisions({p});
      FAIL() << p;
    } catch (const train::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("not available in this build"), std::string::npos);
    }
  }
  // Checked before anything runs: no folder appears.
  TempDir dir;
  StudyConfig c = tiny({"nope"});
  c.out_dir = dir / "never";
  EXPECT_THROW(run_study(c), train::ConfigError);
  EXPECT_FALSE(std::filesystem::exists(dir / "never"));
}

TEST(StudyRunner, DefaultPrecisionsAreAvailableOnesOfTheSeedsList) {
  const auto d = default_study_precisions();
  ASSERT_FALSE(d.empty());
  EXPECT_EQ(d.front(), "fp32");
  EXPECT_NO_THROW(check_precisions(d));
  EXPECT_EQ(std::find(d.begin(), d.end(), "fp64"), d.end()) << "not in the seeds' list, and slow";
}

TEST(StudyRunner, PrecisionsFollowTheModel) {
  // int8-qat wraps the mlp's and cnn's layers only: a gpt study leaves it out by default and
  // refuses it by name before anything runs, instead of reporting a failed run at the end.
  for (const char* m : {"mlp", "cnn"}) {
    const auto d = default_study_precisions(m);
    EXPECT_NE(std::find(d.begin(), d.end(), "int8-qat"), d.end()) << m;
    EXPECT_NO_THROW(check_precisions({"fp32", "int8-qat"}, m)) << m;
  }
  const auto g = default_study_precisions("gpt");
  EXPECT_EQ(std::find(g.begin(), g.end(), "int8-qat"), g.end());
  EXPECT_NE(std::find(g.begin(), g.end(), "bf16"), g.end());
  EXPECT_NO_THROW(check_precisions(g, "gpt"));
  for (const char* p : {"int8-qat", "int8-qat:per_channel=0"}) {
    EXPECT_FALSE(train::recipe_traits(p).supports_model("gpt")) << p;
    EXPECT_TRUE(train::recipe_traits(p).supports_model("cnn")) << p;
  }
  try {
    check_precisions({"fp32", "int8-qat"}, "gpt");
    FAIL() << "int8-qat accepted for the gpt";
  } catch (const train::ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'int8-qat' cannot train the gpt"), std::string::npos) << m;
    EXPECT_NE(m.find("--model mlp|cnn"), std::string::npos) << m;
  }
  TempDir dir;
  StudyConfig c = tiny({"fp32", "int8-qat"});
  c.base.model.name = "gpt";
  c.out_dir = dir / "never";
  EXPECT_THROW(run_study(c), train::ConfigError);
  EXPECT_FALSE(std::filesystem::exists(dir / "never"));
}

TEST(StudyRunner, OutputFolderRules) {
  TempDir dir;
  EXPECT_NO_THROW(check_output_dir(dir / "missing", false));
  std::filesystem::create_directories(dir / "empty");
  EXPECT_NO_THROW(check_output_dir(dir / "empty", false));
  std::filesystem::create_directories(dir / "photos");
  std::ofstream(dir / "photos" / "cat.jpg") << "meow";
  try {
    check_output_dir(dir / "photos", false);
    FAIL() << "a folder with other content was accepted";
  } catch (const StudyError& e) {
    EXPECT_NE(std::string(e.what()).find("refusing to write into"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("use --force"), std::string::npos);
  }
  EXPECT_NO_THROW(check_output_dir(dir / "photos", true));
  std::ofstream(dir / "afile") << "x";
  EXPECT_THROW(check_output_dir(dir / "afile", true), StudyError);
  // A results.json that is not a study's does not make the folder one.
  std::filesystem::create_directories(dir / "other");
  std::ofstream(dir / "other" / "results.json") << R"({"runs": []})";
  EXPECT_FALSE(is_previous_study(dir / "other"));
  EXPECT_THROW(check_output_dir(dir / "other", false), StudyError);

  // run_study refuses before running, and leaves the folder as it was.
  StudyConfig c = tiny({"fp32"});
  c.out_dir = dir / "photos";
  EXPECT_THROW(run_study(c), StudyError);
  EXPECT_FALSE(std::filesystem::exists(dir / "photos" / "results.json"));
  c.force = true;
  c.base.epochs = 0;
  c.base.steps = 2;
  EXPECT_NO_THROW(run_study(c));
  EXPECT_TRUE(std::filesystem::exists(dir / "photos" / "results.json"));
  EXPECT_TRUE(std::filesystem::exists(dir / "photos" / "cat.jpg"));
}

TEST(StudyRunner, CurvesAreDownsampled) {
  std::vector<std::pair<int64_t, double>> curve;
  for (int i = 1; i <= 2000; ++i) curve.emplace_back(i, 1.0 / i);
  const auto d = downsample_curve(curve, 500);
  EXPECT_LE(d.size(), 500u);
  EXPECT_GE(d.size(), 400u);
  EXPECT_EQ(d.front(), curve.front());
  EXPECT_EQ(d.back(), curve.back());
  EXPECT_EQ(downsample_curve(curve, 5000), curve);

  std::vector<std::pair<int64_t, double>> scale;
  for (int i = 1; i <= 3000; ++i) scale.emplace_back(i, i < 1000 ? 65536.0 : 32768.0);
  const auto s = downsample_steps(scale, 500);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0], scale[0]);
  EXPECT_EQ(s[1], scale[999]) << "the first step at the new scale";
  EXPECT_EQ(s[2], scale.back());
}

TEST(StudyRunner, TextOutputs) {
  const StudyOutcome o = run_study(tiny({"fp32", "fp64"}));
  const std::string t = format_study_table(o.results);
  EXPECT_NE(t.find("precision"), std::string::npos);
  EXPECT_NE(t.find("baseline"), std::string::npos);
  EXPECT_NE(t.find("fp64"), std::string::npos);
  if (o.results.runs[0].energy_is_estimate()) {
    EXPECT_NE(t.find("(estimate)"), std::string::npos) << t;
  }
  EXPECT_NE(t.find("recommended: "), std::string::npos) << t;
  const std::string line = format_run_line(o.results.runs[0]);
  EXPECT_EQ(line.rfind("fp32  seed 3: accuracy ", 0), 0u) << line;
}

}  // namespace
}  // namespace mixp::study
