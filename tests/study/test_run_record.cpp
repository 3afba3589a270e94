// RunRecord: JSON round trip with the train --json field names, extra fields kept, bad input
// rejected with the field named, and aggregation over seeds (mean, sample std).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "mixp/study/run_record.h"
#include "study_fixtures.h"

namespace mixp::study {
namespace {

using nlohmann::json;

RunRecord full_record() {
  RunRecord r = test::make_run("bf16", 5.5, 0.884, 58'000'000, 21.0);
  r.tokens_per_s = 1234.5;
  r.val_loss = 1.25;
  r.skipped_steps = 3;
  r.seed = 18446744073709551615ull;  // the largest seed survives the round trip
  r.loss_scale_trace = {{0, 65536.0}, {10, 32768.0}};
  r.error = "note, with \"quotes\"";
  return r;
}

void expect_same(const RunRecord& a, const RunRecord& b) {
  EXPECT_EQ(a.model, b.model);
  EXPECT_EQ(a.precision, b.precision);
  EXPECT_EQ(a.steps, b.steps);
  EXPECT_EQ(a.skipped_steps, b.skipped_steps);
  EXPECT_DOUBLE_EQ(a.ms_per_step, b.ms_per_step);
  EXPECT_DOUBLE_EQ(a.samples_per_s, b.samples_per_s);
  EXPECT_EQ(a.tokens_per_s, b.tokens_per_s);
  EXPECT_EQ(a.test_accuracy, b.test_accuracy);
  EXPECT_EQ(a.val_loss, b.val_loss);
  if (std::isfinite(a.final_loss)) {
    EXPECT_DOUBLE_EQ(a.final_loss, b.final_loss);
  } else {
    EXPECT_TRUE(std::isnan(b.final_loss));
  }
  EXPECT_EQ(a.peak_memory_bytes, b.peak_memory_bytes);
  EXPECT_EQ(a.peak_rss_bytes, b.peak_rss_bytes);
  EXPECT_DOUBLE_EQ(a.train_time_s, b.train_time_s);
  EXPECT_EQ(a.energy_joules, b.energy_joules);
  EXPECT_EQ(a.energy_source, b.energy_source);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.diverged, b.diverged);
  EXPECT_EQ(a.diverged_at_step, b.diverged_at_step);
  EXPECT_EQ(a.error, b.error);
  ASSERT_EQ(a.loss_curve.size(), b.loss_curve.size());
  for (size_t i = 0; i < a.loss_curve.size(); ++i) {
    EXPECT_EQ(a.loss_curve[i].first, b.loss_curve[i].first);
    if (std::isfinite(a.loss_curve[i].second)) {
      EXPECT_DOUBLE_EQ(a.loss_curve[i].second, b.loss_curve[i].second);
    } else {
      EXPECT_TRUE(std::isnan(b.loss_curve[i].second));
    }
  }
  EXPECT_EQ(a.loss_scale_trace, b.loss_scale_trace);
  EXPECT_EQ(a.num_seeds, b.num_seeds);
  EXPECT_EQ(a.seeds, b.seeds);
  EXPECT_EQ(a.stddev, b.stddev);
}

TEST(RunRecord, JsonHasTheTrainJsonFieldNames) {
  json j = json::parse(to_json_string(full_record()));
  for (const char* k : {"model",         "precision",         "steps",
                        "skipped_steps", "ms_per_step",       "samples_per_s",
                        "tokens_per_s",  "test_accuracy",     "val_loss",
                        "final_loss",    "peak_memory_bytes", "peak_rss_bytes",
                        "train_time_s",  "energy_joules",     "energy_source",
                        "seed",          "diverged",          "error",
                        "loss_curve",    "loss_scale_trace"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
  EXPECT_EQ(j["loss_curve"][1], json::array({10, j["loss_curve"][1][1]}));
  EXPECT_EQ(j["energy_source"], "estimate");
  EXPECT_FALSE(j.contains("num_seeds"));  // single runs carry no aggregation fields
}

TEST(RunRecord, RoundTrip) {
  RunRecord r = full_record();
  expect_same(r, run_record_from_json(to_json_string(r)));
  expect_same(r, run_record_from_json(to_json_string(r, 2)));
}

TEST(RunRecord, DivergedRunRoundTripsWithNullLoss) {
  RunRecord r = test::crafted_study().runs[2];  // fp16, diverged at step 120
  std::string text = to_json_string(r);
  json j = json::parse(text);
  EXPECT_TRUE(j["final_loss"].is_null());
  EXPECT_TRUE(j["test_accuracy"].is_null());
  EXPECT_TRUE(j["loss_curve"].back()[1].is_null());
  EXPECT_EQ(j["diverged_at_step"], 120);
  expect_same(r, run_record_from_json(text));
}

TEST(RunRecord, NullFinalLossMeansDivergedWhenNotSaid) {
  RunRecord r =
      run_record_from_json(R"({"model":"mlp","precision":"fp16","steps":50,"final_loss":null})");
  EXPECT_TRUE(r.diverged);
  EXPECT_TRUE(std::isnan(r.final_loss));
  EXPECT_EQ(r.energy_source, "unavailable");
}

// A `mixp train --json` object of a run that did not train (docs/train.md) is a diverged run,
// even with a finite last loss (a loss scaler that skipped most steps).
TEST(RunRecord, NotTrainedMeansDivergedWhenNotSaid) {
  RunRecord r = run_record_from_json(
      R"({"model":"mlp","precision":"fp16","steps":4,"skipped_steps":4,"final_loss":2.3,)"
      R"("trained":false,"not_trained":"the run did not train: ..."})");
  EXPECT_TRUE(r.diverged);
  EXPECT_TRUE(r.extra_json.empty()) << r.extra_json;
  r = run_record_from_json(R"({"model":"mlp","precision":"fp16","steps":4,"final_loss":2.3,)"
                           R"("trained":true})");
  EXPECT_FALSE(r.diverged);
}

TEST(RunRecord, KeepsTheTrainersOtherFields) {
  // A line as `mixp train --json` prints it (mixp::train::result_to_json).
  const char* line =
      R"({"model":"mlp","precision":"bf16","optimizer":"adamw","data":"fashion-mnist","steps":100,)"
      R"("steps_this_run":100,"skipped_steps":0,"epochs":0.21,"batch":128,"grad_accum":1,)"
      R"("ms_per_step":3.5,"samples_per_s":36571.4,"test_accuracy":0.81,"test_loss":0.52,)"
      R"("final_loss":0.55,"peak_memory_bytes":1234567,"peak_rss_bytes":99999999,)"
      R"("energy_joules":null,"energy_source":"unavailable","train_time_s":0.35,)"
      R"("total_time_s":1.2,"threads":2,"parameters":669706,"seed":7})";
  RunRecord r = run_record_from_json(line);
  EXPECT_EQ(r.precision, "bf16");
  EXPECT_EQ(r.test_accuracy, 0.81);
  EXPECT_FALSE(r.energy_joules);
  EXPECT_FALSE(r.diverged);
  EXPECT_EQ(r.seed, 7u);
  json back = json::parse(to_json_string(r));
  for (const char* k : {"optimizer", "data", "steps_this_run", "epochs", "batch", "grad_accum",
                        "test_loss", "total_time_s", "threads", "parameters"}) {
    EXPECT_EQ(back[k], json::parse(line)[k]) << k;
  }
}

TEST(RunRecord, BadInputNamesTheField) {
  auto message = [](const char* text) {
    try {
      run_record_from_json(text);
    } catch (const RecordError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(R"({"precision":"fp32","steps":1})").find("\"model\""), std::string::npos);
  EXPECT_NE(message(R"({"model":"m","precision":"fp32","steps":"many"})").find("\"steps\""),
            std::string::npos);
  EXPECT_NE(message(R"({"model":"m","precision":"fp32","steps":1,"ms_per_step":"x"})")
                .find("ms_per_step"),
            std::string::npos);
  EXPECT_NE(message(R"({"model":"m","precision":"fp32","steps":1,"loss_curve":[[1]]})")
                .find("loss_curve"),
            std::string::npos);
  EXPECT_NE(message("[1, 2]").find("object"), std::string::npos);
  EXPECT_NE(message("{not json").find("not valid JSON"), std::string::npos);
}

TEST(MeanStd, SampleStandardDeviation) {
  std::vector<double> v = {10, 12, 14};
  MeanStd m = mean_std(v);
  EXPECT_DOUBLE_EQ(m.mean, 12.0);
  EXPECT_DOUBLE_EQ(m.stddev, 2.0);  // sqrt((4 + 0 + 4) / (3 - 1))
  EXPECT_EQ(m.n, 3);
  std::vector<double> one = {5};
  EXPECT_DOUBLE_EQ(mean_std(one).stddev, 0.0);
  EXPECT_EQ(mean_std({}).n, 0);
}

TEST(Aggregate, MeanAndStdOverSeeds) {
  std::vector<RunRecord> seeds;
  double ms[] = {10, 12, 14};
  double acc[] = {0.88, 0.89, 0.90};
  for (int i = 0; i < 3; ++i) {
    RunRecord r = test::make_run("fp32", ms[i], acc[i], 1000 * (i + 1), 10.0 * (i + 1));
    r.seed = uint64_t(i + 1);
    r.loss_curve = {{0, 2.0 + i}, {10, 1.0 + i}};
    seeds.push_back(r);
  }
  RunRecord a = aggregate_runs(seeds);
  EXPECT_EQ(a.num_seeds, 3);
  EXPECT_EQ(a.seeds, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_DOUBLE_EQ(a.ms_per_step, 12.0);
  EXPECT_DOUBLE_EQ(a.stddev.at("ms_per_step"), 2.0);
  EXPECT_NEAR(*a.test_accuracy, 0.89, 1e-12);
  EXPECT_NEAR(a.stddev.at("test_accuracy"), 0.01, 1e-12);
  EXPECT_EQ(a.peak_memory_bytes, 2000);
  EXPECT_DOUBLE_EQ(*a.energy_joules, 20.0);
  ASSERT_EQ(a.loss_curve.size(), 2u);
  EXPECT_DOUBLE_EQ(a.loss_curve[0].second, 3.0);
  EXPECT_DOUBLE_EQ(a.loss_curve[1].second, 2.0);
  EXPECT_FALSE(a.diverged);

  // Aggregates survive the JSON round trip (num_seeds, seeds, std).
  RunRecord back = run_record_from_json(to_json_string(a));
  EXPECT_EQ(back.num_seeds, 3);
  EXPECT_EQ(back.seeds, a.seeds);
  EXPECT_DOUBLE_EQ(back.stddev.at("ms_per_step"), 2.0);
}

TEST(Aggregate, DivergedSeedIsCountedAndLeftOutOfQuality) {
  RunRecord ok1 = test::make_run("fp16", 5, 0.88, 100, 1);
  RunRecord ok2 = test::make_run("fp16", 7, 0.86, 100, 1);
  RunRecord bad = test::make_run("fp16", 6, 0.10, 100, 1);
  bad.diverged = true;
  bad.diverged_at_step = 300;
  bad.final_loss = std::numeric_limits<double>::quiet_NaN();
  RunRecord bad2 = bad;
  bad2.diverged_at_step = 200;
  std::vector<RunRecord> seeds = {ok1, bad, ok2, bad2};
  RunRecord a = aggregate_runs(seeds);
  EXPECT_TRUE(a.diverged);
  EXPECT_EQ(a.diverged_seeds, 2);
  EXPECT_EQ(a.diverged_at_step, 200);
  EXPECT_NEAR(*a.test_accuracy, 0.87, 1e-12);  // the diverged seeds' 0.10 is not averaged in
  EXPECT_DOUBLE_EQ(a.ms_per_step, 6.0);        // time counts every seed
}

TEST(Aggregate, GroupsByPrecisionAndRejectsMixtures) {
  std::vector<RunRecord> runs = {test::make_run("fp32", 10, 0.9, 1, 1),
                                 test::make_run("bf16", 5, 0.9, 1, 1),
                                 test::make_run("fp32", 12, 0.9, 1, 1)};
  auto g = aggregate_by_precision(runs);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0].precision, "fp32");
  EXPECT_EQ(g[0].num_seeds, 2);
  EXPECT_DOUBLE_EQ(g[0].ms_per_step, 11.0);
  EXPECT_EQ(g[1].num_seeds, 1);
  EXPECT_THROW(aggregate_runs(runs), RecordError);
  EXPECT_THROW(aggregate_runs({}), RecordError);
}

}  // namespace
}  // namespace mixp::study
