// Verdicts and the recommendation on crafted runs: a faster bf16 that keeps accuracy, an fp16
// that diverges, an fp8 that is fastest but loses one point.
#include <gtest/gtest.h>

#include <limits>
#include <stdexcept>
#include <vector>

#include "mixp/study/verdict.h"
#include "study_fixtures.h"

namespace mixp::study {
namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(Verdict, CraftedStudy) {
  StudyResults s = test::crafted_study();
  auto v = compute_verdicts(s);
  ASSERT_EQ(v.size(), 4u);

  // fp32: the baseline.
  EXPECT_TRUE(v[0].is_baseline);
  EXPECT_DOUBLE_EQ(*v[0].speedup, 1.0);
  EXPECT_EQ(v[0].speedup_check, CheckResult::not_applicable);
  EXPECT_EQ(v[0].memory_check, CheckResult::not_applicable);
  EXPECT_EQ(v[0].accuracy_check, CheckResult::pass);
  EXPECT_EQ(v[0].finite_check, CheckResult::pass);
  EXPECT_TRUE(v[0].acceptable());
  EXPECT_FALSE(v[0].passes_all());

  // bf16: 10 / 5.5 = 1.82x (short of 2x), 42% less memory, -0.10 points, finite.
  EXPECT_NEAR(*v[1].speedup, 10.0 / 5.5, 1e-12);
  EXPECT_EQ(v[1].speedup_check, CheckResult::fail);
  EXPECT_NEAR(*v[1].memory_saving, 0.42, 1e-12);
  EXPECT_EQ(v[1].memory_check, CheckResult::pass);
  EXPECT_EQ(v[1].quality, QualityMetric::test_accuracy);
  EXPECT_NEAR(*v[1].accuracy_delta_points, -0.10, 1e-9);
  EXPECT_EQ(v[1].accuracy_check, CheckResult::pass);
  EXPECT_EQ(v[1].finite_check, CheckResult::pass);
  EXPECT_TRUE(v[1].acceptable());
  EXPECT_FALSE(v[1].passes_all());
  EXPECT_NEAR(*v[1].energy_ratio, 21.0 / 50.0, 1e-12);

  // fp16: diverged at step 120.
  EXPECT_TRUE(v[2].diverged);
  EXPECT_EQ(v[2].diverged_at_step, 120);
  EXPECT_EQ(v[2].finite_check, CheckResult::fail);
  EXPECT_EQ(v[2].accuracy_check, CheckResult::fail);
  EXPECT_FALSE(v[2].acceptable());

  // fp8: 2.5x and 60% less memory, but one point of accuracy lost.
  EXPECT_EQ(v[3].speedup_check, CheckResult::pass);
  EXPECT_EQ(v[3].memory_check, CheckResult::pass);
  EXPECT_NEAR(*v[3].accuracy_delta_points, -1.0, 1e-9);
  EXPECT_EQ(v[3].accuracy_check, CheckResult::fail);
  EXPECT_FALSE(v[3].acceptable());

  Recommendation rec = recommend(s, v);
  EXPECT_EQ(rec.precision, "bf16");
  EXPECT_TRUE(contains(rec.reason, "fp16 diverged at step 120")) << rec.reason;
  EXPECT_TRUE(contains(rec.reason, "fp8 was faster but lost 1.00 points")) << rec.reason;
  EXPECT_EQ(summary_sentence(s, v, rec),
            "bf16 was 1.8x faster than fp32 with 0.10 points less accuracy and 42% less memory.");
}

TEST(Verdict, AccuracyThresholdIsStrictAndGainsPass) {
  StudyResults s;
  s.runs = {test::make_run("fp32", 10, 0.900, 100, 1), test::make_run("a", 3.5, 0.895, 50, 1),
            test::make_run("b", 4, 0.8951, 50, 1), test::make_run("c", 4, 0.93, 50, 1)};
  auto v = compute_verdicts(s);
  EXPECT_EQ(v[1].accuracy_check, CheckResult::fail);  // exactly 0.5 points lost: not < 0.5
  EXPECT_EQ(v[2].accuracy_check, CheckResult::pass);  // 0.49 points
  EXPECT_EQ(v[3].accuracy_check, CheckResult::pass);  // +3 points
  EXPECT_TRUE(v[3].passes_all());                     // 2.5x, 50% saving, better, finite
  Recommendation rec = recommend(s, v);
  EXPECT_EQ(rec.precision, "b");  // b and c tie at 4 ms: the earlier run wins
  EXPECT_TRUE(contains(rec.reason, "a was faster but lost 0.50 points")) << rec.reason;
}

TEST(Verdict, PassingAllCriteriaIsSaid) {
  StudyResults s;
  s.runs = {test::make_run("fp32", 10, 0.90, 100, 1), test::make_run("bf16", 4, 0.899, 50, 1)};
  auto v = compute_verdicts(s);
  EXPECT_TRUE(v[1].passes_all());
  Recommendation rec = recommend(s, v);
  EXPECT_EQ(rec.precision, "bf16");
  EXPECT_TRUE(contains(rec.reason, "meets all four")) << rec.reason;
}

TEST(Verdict, BaselineStaysWhenNothingFasterIsAcceptable) {
  StudyResults s;
  s.runs = {test::make_run("fp32", 10, 0.90, 100, 1), test::make_run("fp8", 5, 0.85, 50, 1),
            test::make_run("fp64", 30, 0.90, 200, 1)};
  auto v = compute_verdicts(s);
  Recommendation rec = recommend(s, v);
  EXPECT_EQ(rec.precision, "fp32");
  EXPECT_TRUE(contains(rec.reason, "fp32 stays the choice")) << rec.reason;
  EXPECT_TRUE(contains(rec.reason, "accuracy within 0.5 points of fp32")) << rec.reason;
  EXPECT_TRUE(contains(rec.reason, "fp8 was faster but lost 5.00 points")) << rec.reason;
  // The headline then describes the fastest other run that finished.
  EXPECT_TRUE(contains(summary_sentence(s, v, rec), "fp8 was 2.0x faster than fp32"));
}

TEST(Verdict, NoBaselineOrDivergedBaseline) {
  StudyResults s;
  s.runs = {test::make_run("bf16", 5, 0.9, 100, 1), test::make_run("fp16", 4, 0.9, 100, 1)};
  auto v = compute_verdicts(s);
  EXPECT_EQ(v[0].accuracy_check, CheckResult::not_applicable);
  EXPECT_FALSE(v[0].speedup);
  Recommendation rec = recommend(s, v);
  EXPECT_EQ(rec.precision, "fp16");
  EXPECT_TRUE(contains(rec.reason, "no fp32 baseline was run")) << rec.reason;
  EXPECT_EQ(summary_sentence(s, v, rec), "");

  RunRecord base = test::make_run("fp32", 10, 0.9, 100, 1);
  base.diverged = true;
  base.diverged_at_step = 7;
  base.final_loss = std::numeric_limits<double>::quiet_NaN();
  s.runs.insert(s.runs.begin(), base);
  v = compute_verdicts(s);
  rec = recommend(s, v);
  EXPECT_EQ(rec.precision, "fp16");
  EXPECT_TRUE(contains(rec.reason, "baseline diverged at step 7")) << rec.reason;

  for (RunRecord& r : s.runs) r.diverged = true;
  v = compute_verdicts(s);
  rec = recommend(s, v);
  EXPECT_EQ(rec.precision, "");
  EXPECT_TRUE(contains(rec.reason, "Every run diverged or failed")) << rec.reason;
  EXPECT_EQ(recommend(StudyResults{}, {}).precision, "");
}

// The headline never contradicts the table (issue 18): every outcome says what happened.
TEST(Verdict, HeadlineIsTrueInEveryOutcome) {
  auto headline = [](const StudyResults& s) {
    const auto v = compute_verdicts(s);
    return summary_sentence(s, v, recommend(s, v));
  };
  auto diverged = [](RunRecord r, int64_t step) {
    r.diverged = true;
    r.diverged_at_step = step;
    r.final_loss = std::numeric_limits<double>::quiet_NaN();
    return r;
  };
  StudyResults s;
  // Every run diverged: nobody "finished".
  s.runs = {diverged(test::make_run("fp32", 10, 0.9, 100, 1), 3),
            diverged(test::make_run("bf16", 5, 0.9, 50, 1), 4)};
  std::string h = headline(s);
  EXPECT_EQ(h, "Every run diverged: fp32 diverged at step 3 and bf16 diverged at step 4.");
  EXPECT_FALSE(contains(h, "finished")) << h;
  // The baseline diverged, the other finished.
  s.runs = {diverged(test::make_run("fp32", 10, 0.9, 100, 1), 3),
            test::make_run("bf16", 5, 0.9, 50, 1)};
  h = headline(s);
  EXPECT_EQ(h,
            "bf16 finished, but the fp32 baseline diverged at step 3, so nothing could be "
            "compared.");
  // The other diverged, the baseline finished (the old sentence, still true).
  s.runs = {test::make_run("fp32", 10, 0.9, 100, 1),
            diverged(test::make_run("bf16", 5, 0.9, 50, 1), 4)};
  EXPECT_EQ(headline(s), "bf16 diverged at step 4; fp32 finished.");
  // Both diverged, with a third run that finished: the baseline is not said to have finished.
  s.runs = {diverged(test::make_run("fp32", 10, 0.9, 100, 1), 3),
            diverged(test::make_run("bf16", 5, 0.9, 50, 1), 4),
            test::make_run("fp16", 6, 0.9, 50, 1)};
  h = headline(s);
  EXPECT_FALSE(contains(h, "fp32 finished")) << h;
  EXPECT_TRUE(contains(h, "fp32 baseline diverged at step 3")) << h;
  // One run.
  s.runs = {test::make_run("fp32", 10, 0.9, 100, 1)};
  EXPECT_EQ(headline(s),
            "fp32 finished; no other precision was run, so there is nothing to "
            "compare.");
  s.runs = {diverged(test::make_run("fp32", 10, 0.9, 100, 1), 3)};
  EXPECT_EQ(headline(s), "fp32 diverged at step 3.");
  s.runs = {test::make_run("fp32", 10, 0.9, 100, 1)};
  s.runs[0].error = "out of memory";
  EXPECT_EQ(headline(s), "fp32 failed: out of memory.");
}

TEST(Verdict, LanguageModelsAreJudgedOnValidationLoss) {
  StudyResults s;
  RunRecord base = test::make_run("fp32", 10, 0, 100, 1);
  base.test_accuracy.reset();
  base.val_loss = 2.0;
  RunRecord good = base, bad = base;
  good.precision = "bf16";
  good.ms_per_step = 5;
  good.val_loss = 2.006;  // +0.3%
  bad.precision = "fp8";
  bad.ms_per_step = 4;
  bad.val_loss = 2.02;  // +1%
  s.runs = {base, good, bad};
  auto v = compute_verdicts(s);
  EXPECT_EQ(v[1].quality, QualityMetric::val_loss);
  EXPECT_NEAR(*v[1].loss_increase, 0.003, 1e-9);
  EXPECT_EQ(v[1].accuracy_check, CheckResult::pass);
  EXPECT_EQ(v[2].accuracy_check, CheckResult::fail);
  Recommendation rec = recommend(s, v);
  EXPECT_EQ(rec.precision, "bf16");
  EXPECT_TRUE(contains(summary_sentence(s, v, rec), "0.3% higher validation loss"));
}

TEST(Verdict, EnergyRatioNeedsTheSameSourceAndMemoryFallsBackToRss) {
  StudyResults s;
  RunRecord base = test::make_run("fp32", 10, 0.9, 0, 100);
  base.energy_source = "rapl";
  RunRecord other = test::make_run("bf16", 5, 0.9, 0, 40);
  base.peak_rss_bytes = 1000;
  other.peak_rss_bytes = 600;
  s.runs = {base, other};
  auto v = compute_verdicts(s);
  EXPECT_FALSE(v[1].energy_ratio);  // rapl vs estimate: not comparable
  EXPECT_TRUE(v[1].memory_from_rss);
  EXPECT_NEAR(*v[1].memory_saving, 0.4, 1e-12);
  s.runs[1].energy_source = "rapl";
  v = compute_verdicts(s);
  EXPECT_NEAR(*v[1].energy_ratio, 0.4, 1e-12);
}

TEST(Verdict, FailedRunIsNotUsableAndNotCalledDiverged) {
  StudyResults s;
  RunRecord base = test::make_run("fp32", 10, 0.9, 100, 1);
  RunRecord failed = test::make_run("int8-qat", 3, 0.9, 50, 1);
  failed.error = "oneDNN: unsupported";
  failed.test_accuracy.reset();
  s.runs = {base, failed};
  auto v = compute_verdicts(s);
  EXPECT_FALSE(v[1].diverged);
  EXPECT_EQ(v[1].finite_check, CheckResult::not_applicable);
  EXPECT_EQ(v[1].accuracy_check, CheckResult::fail);
  Recommendation rec = recommend(s, v);
  EXPECT_EQ(rec.precision, "fp32");
  EXPECT_TRUE(contains(rec.reason, "int8-qat failed")) << rec.reason;
}

// The speed check on timing rounds (docs/study.md, "Timing in rounds"): pass or fail only when the
// target lies outside the range of the rounds' ratios.
TEST(Verdict, SpeedCheckOnConstructedRounds) {
  const std::vector<double> base = {10, 10, 10, 10, 10};
  // Ratios 2.5, 2.22, 2.38, 2.04, 2.27: every round above 2x.
  SpeedJudgement j = judge_speedup(base, std::vector<double>{4, 4.5, 4.2, 4.9, 4.4}, 2.0);
  EXPECT_EQ(j.check, CheckResult::pass) << j.reason;
  EXPECT_NEAR(j.min, 10 / 4.9, 1e-12);
  EXPECT_NEAR(j.max, 2.5, 1e-12);
  EXPECT_NEAR(j.speedup, 10 / 4.4, 1e-12);  // the median ratio
  // Ratios 1.67, 1.67, 1.43, 1.82, 2.0: none above (exactly 2.0 is not "> 2x").
  j = judge_speedup(base, std::vector<double>{6, 6, 7, 5.5, 5}, 2.0);
  EXPECT_EQ(j.check, CheckResult::fail) << j.reason;
  EXPECT_NEAR(j.max, 2.0, 1e-12);
  // Ratios 2.5, 1.67, 2.0, 2.22, 1.43: the target within the range, whatever the median says.
  j = judge_speedup(base, std::vector<double>{4, 6, 5, 4.5, 7}, 2.0);
  EXPECT_EQ(j.check, CheckResult::inconclusive) << j.reason;
  EXPECT_TRUE(contains(j.reason, "inconclusive")) << j.reason;
  EXPECT_TRUE(contains(j.reason, "1.43x to 2.50x")) << j.reason;
  // Paired by round: a load burst that slows both precisions in one round does not widen the
  // ratio's range (round 2 is 3x slower for both).
  j = judge_speedup(std::vector<double>{10, 30, 10}, std::vector<double>{4, 12, 4.1}, 2.0);
  EXPECT_EQ(j.check, CheckResult::pass) << j.reason;
  // One measurement each: its own range.
  j = judge_speedup(std::vector<double>{10}, std::vector<double>{4}, 2.0);
  EXPECT_EQ(j.check, CheckResult::pass);
  EXPECT_THROW(judge_speedup(base, std::vector<double>{1, 2}, 2.0), std::invalid_argument);
  EXPECT_THROW(judge_speedup(std::vector<double>{}, std::vector<double>{}, 2.0),
               std::invalid_argument);
  EXPECT_THROW(judge_speedup(std::vector<double>{1}, std::vector<double>{0}, 2.0),
               std::invalid_argument);
}

TEST(Verdict, SpeedCheckUsesTheTimingRoundsOfTheStudy) {
  StudyResults s = test::crafted_study();
  // The runs' medians say bf16 is 1.82x (fail) and fp8 2.5x (pass); the rounds decide instead.
  s.timing.rounds = 3;
  s.timing.steps_per_round = 10;
  s.timing.precisions = {{"fp32", {10, 11, 9}}, {"bf16", {4, 6.5, 4.2}}, {"fp8", {5.5, 6, 5}}};
  auto v = compute_verdicts(s);
  EXPECT_EQ(v[1].speedup_check, CheckResult::inconclusive) << v[1].speed_reason;
  EXPECT_EQ(v[1].speed_rounds, 3);
  EXPECT_NEAR(*v[1].speedup_min, 11 / 6.5, 1e-12);
  EXPECT_NEAR(*v[1].speedup_max, 10 / 4.0, 1e-12);
  EXPECT_NEAR(*v[1].speedup, 9 / 4.2, 1e-12);
  EXPECT_NEAR(*v[1].time_ratio, 4.2 / 9, 1e-12);
  EXPECT_NEAR(*v[1].step_ms_median, 4.2, 1e-12);
  EXPECT_NEAR(*v[1].step_ms_min, 4.0, 1e-12);
  EXPECT_NEAR(*v[1].step_ms_max, 6.5, 1e-12);
  EXPECT_EQ(v[3].speedup_check, CheckResult::fail) << v[3].speed_reason;  // 1.8x-1.83x
  EXPECT_EQ(v[0].speedup_check, CheckResult::not_applicable);
  // The recommendation says the speed target is open rather than missed.
  const Recommendation rec = recommend(s, v);
  EXPECT_EQ(rec.precision, "bf16");
  EXPECT_TRUE(contains(rec.reason, "inconclusive")) << rec.reason;
  // A precision without rounds (fp8's dropped here) keeps the runs' medians, and says so.
  s.timing.precisions.pop_back();
  v = compute_verdicts(s);
  EXPECT_EQ(v[3].speed_rounds, 0);
  EXPECT_EQ(v[3].speedup_check, CheckResult::pass);
  EXPECT_TRUE(contains(v[3].speed_reason, "not timed in rounds")) << v[3].speed_reason;
}

}  // namespace
}  // namespace mixp::study
