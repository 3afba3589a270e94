// The advisor's decision (mixp/inspect/advisor.h) on synthetic statistics: each rule fires on the
// number it names and only then, the first rule in order wins, and the --layer-precision rules
// follow the choices. The runs around it are tested end to end in test_advise_cli.cpp.
#include <gtest/gtest.h>

#include <functional>

#include "common/error_of.h"
#include "mixp/inspect/advisor.h"

namespace mixp::inspect {
namespace {

// A record whose statistics give exactly the fractions and relative errors asked for (numel 1000,
// rms 1, so mse = relative MSE).
StatRecord rec(const std::string& module, const std::string& kind, Role role,
               const std::string& tensor = "output") {
  StatRecord r;
  r.step = 1;
  r.module = module;
  r.kind = kind;
  r.role = role;
  r.tensor = tensor;
  r.stats.numel = 1000;
  r.stats.rms = 1.0;
  r.stats.amax = 4.0;
  r.stats.amin_nz = 1e-3;
  r.stats.dynamic_range = 12;
  for (StatFormat f : all_stat_formats()) {
    FormatStats fs;
    fs.format = f;
    r.stats.formats.push_back(fs);
  }
  r.stats.formats[size_t(StatFormat::bf16)].mse = 1e-6;
  r.stats.formats[size_t(StatFormat::mxfp8)].mse = 1e-3;
  return r;
}

FormatStats& fmt_of(StatRecord& r, StatFormat f) {
  return r.stats.formats[size_t(f)];
}

// fc1 (linear), head: output, weight and output gradient each; fc1's tensors edited by `edit`.
std::vector<StatRecord> layer(const std::string& name, const std::string& kind,
                              const std::function<void(std::vector<StatRecord>&)>& edit = {}) {
  std::vector<StatRecord> v = {rec(name, kind, Role::activation),
                               rec(name, "linear", Role::weight, "weight"),
                               rec(name, kind, Role::activation_grad)};
  v[2].stats.dynamic_range = 20;
  if (edit) edit(v);
  return v;
}

LayerAdvice advise_one(const std::function<void(std::vector<StatRecord>&)>& edit,
                       const std::string& kind = "linear") {
  const auto a = advise_layers(layer("fc1", kind, edit));
  EXPECT_EQ(a.size(), 1u);
  return a.at(0);
}

TEST(Advisor, EachRuleFiresOnItsNumber) {
  const LayerAdvice ok = advise_one({});
  EXPECT_EQ(ok.rule, "fits-fp8");
  EXPECT_EQ(ok.choice, LayerFormat::fp8);
  EXPECT_TRUE(ok.fits_fp8 && ok.fits_bf16 && ok.fits_fp16);
  EXPECT_DOUBLE_EQ(ok.numbers.fp8_rel_mse, 1e-3);
  EXPECT_DOUBLE_EQ(ok.numbers.grad_range, 20);
  EXPECT_EQ(ok.weight_numel, 1000);

  const LayerAdvice nf = advise_one([](auto& v) { v[2].stats.nan = 3; });
  EXPECT_EQ(nf.rule, "nonfinite");
  EXPECT_EQ(nf.choice, LayerFormat::fp32);
  EXPECT_EQ(nf.numbers.nonfinite, 3);
  EXPECT_FALSE(nf.fits_bf16);

  const LayerAdvice ov =
      advise_one([](auto& v) { fmt_of(v[0], StatFormat::bf16).overflow = 1; });
  EXPECT_EQ(ov.rule, "bf16-overflow");
  EXPECT_EQ(ov.choice, LayerFormat::fp32);
  EXPECT_DOUBLE_EQ(ov.numbers.bf16_overflow, 0.001);

  const LayerAdvice be = advise_one([](auto& v) { fmt_of(v[1], StatFormat::bf16).mse = 2e-4; });
  EXPECT_EQ(be.rule, "bf16-error");
  EXPECT_EQ(be.choice, LayerFormat::fp32);

  const LayerAdvice head = advise_one({}, "head");
  EXPECT_EQ(head.rule, "head");
  EXPECT_EQ(head.choice, LayerFormat::bf16);
  EXPECT_TRUE(head.fits_fp8) << "the head's numbers fit; the rule keeps it out anyway";

  const LayerAdvice un =
      advise_one([](auto& v) { fmt_of(v[0], StatFormat::mxfp8).underflow = 11; });  // 1.1%
  EXPECT_EQ(un.rule, "fp8-underflow");
  EXPECT_EQ(un.choice, LayerFormat::bf16);
  EXPECT_FALSE(un.fits_fp8);
  EXPECT_TRUE(advise_one([](auto& v) { fmt_of(v[0], StatFormat::mxfp8).underflow = 10; })
                  .fits_fp8)
      << "1.0% is the limit itself";

  const LayerAdvice me = advise_one([](auto& v) { fmt_of(v[1], StatFormat::mxfp8).mse = 6e-3; });
  EXPECT_EQ(me.rule, "fp8-error");
  EXPECT_EQ(me.numbers.worst_fp8_tensor, "weight");
  EXPECT_NE(me.reason.find("weight"), std::string::npos) << me.reason;

  const LayerAdvice gr = advise_one([](auto& v) { v[2].stats.dynamic_range = 33; });
  EXPECT_EQ(gr.rule, "grad-range");
  EXPECT_EQ(gr.choice, LayerFormat::bf16);
  EXPECT_NE(gr.reason.find("33.0 binades"), std::string::npos) << gr.reason;

  // Only the forward tensors count for mxfp8 and fp16 (a gradient is judged by its range).
  const LayerAdvice g = advise_one([](auto& v) {
    fmt_of(v[2], StatFormat::mxfp8).mse = 1;
    fmt_of(v[2], StatFormat::fp16).overflow = 5;
  });
  EXPECT_EQ(g.rule, "fits-fp8");
  EXPECT_TRUE(g.fits_fp16);
  EXPECT_FALSE(advise_one([](auto& v) { fmt_of(v[0], StatFormat::fp16).overflow = 5; }).fits_fp16);
}

TEST(Advisor, FirstRuleInOrderWinsAndWorstStepCounts) {
  // Non-finite beats everything after it; fp8 errors do not matter once bf16 overflows.
  const LayerAdvice a = advise_one([](auto& v) {
    v[0].stats.inf = 1;
    fmt_of(v[0], StatFormat::bf16).overflow = 1;
    fmt_of(v[0], StatFormat::mxfp8).mse = 1;
  });
  EXPECT_EQ(a.rule, "nonfinite");
  // A later step that is worse decides.
  auto recs = layer("fc1", "linear");
  StatRecord late = recs[0];
  late.step = 6;
  fmt_of(late, StatFormat::mxfp8).mse = 0.02;
  recs.push_back(late);
  EXPECT_EQ(advise_layers(recs).at(0).rule, "fp8-error");
  // Limits are parameters.
  AdviceThresholds loose;
  loose.max_fp8_rel_mse = 0.05;
  EXPECT_EQ(advise_layers(recs, loose).at(0).rule, "fits-fp8");
}

// An FP8 run's statistics (role fp8-operand, tensor_inspector.h): the share of an operand's
// nonzero values that its per-tensor cast flushed to zero decides rule fp8-flush.
TEST(Advisor, FlushedFp8OperandIsFlaggedWithAdvice) {
  auto operand = [](const std::string& tensor, StatFormat f, int64_t zeros, int64_t flushed) {
    StatRecord r;
    r.step = 120;
    r.module = "fc1";
    r.kind = "linear";
    r.role = Role::fp8_operand;
    r.tensor = tensor;
    r.stats.numel = 1000;
    r.stats.zeros = zeros;
    r.stats.formats.push_back(FormatStats{f, 0, flushed, 0, 0.0});
    return r;
  };
  auto with = [&](StatRecord op) {
    auto v = layer("fc1", "linear");
    v.push_back(operand("input", StatFormat::fp8_e4m3, 0, 0));
    v.push_back(std::move(op));
    return advise_layers(v).at(0);
  };
  // 600 of 1000 values are zero (ReLU's mask): 5 flushed of the 400 nonzero is 1.25% > 1%.
  const LayerAdvice a = with(operand("grad_output", StatFormat::fp8_e5m2, 600, 5));
  EXPECT_EQ(a.rule, "fp8-flush");
  EXPECT_EQ(a.choice, LayerFormat::bf16);
  EXPECT_FALSE(a.fits_fp8);
  EXPECT_DOUBLE_EQ(a.numbers.fp8_flush, 5.0 / 400);
  EXPECT_EQ(a.numbers.fp8_flush_operand, "grad_output");
  EXPECT_EQ(a.numbers.fp8_flush_step, 120);
  for (const char* s : {"grad_output (fp8_e5m2)", "1.25%", "step 120", "fp8:amax_history=16",
                        "fp8-current", "bf16 for this layer"})
    EXPECT_NE(a.reason.find(s), std::string::npos) << s << " in: " << a.reason;
  // 4 of 400 is the limit itself (1%): fits.
  EXPECT_EQ(with(operand("grad_output", StatFormat::fp8_e5m2, 600, 4)).rule, "fits-fp8");
  // The share is of the nonzero values: 5 of 1000 with no zeros is 0.5%.
  EXPECT_EQ(with(operand("grad_output", StatFormat::fp8_e5m2, 0, 5)).rule, "fits-fp8");
  // Step 1 does not count (delayed scaling's first cast uses the initial scale 1).
  StatRecord first = operand("grad_output", StatFormat::fp8_e5m2, 600, 5);
  first.step = 1;
  EXPECT_EQ(with(first).rule, "fits-fp8");
  // The head rule comes first.
  auto h = layer("head", "head");
  StatRecord op = operand("grad_output", StatFormat::fp8_e5m2, 0, 900);
  op.module = "head";
  h.push_back(op);
  EXPECT_EQ(advise_layers(h).at(0).rule, "head");
}

TEST(Advisor, LayerRulesFollowTheChoices) {
  std::vector<StatRecord> recs = layer("fc1", "linear");
  for (auto& r : layer("fc2", "linear", [](auto& v) { fmt_of(v[0], StatFormat::mxfp8).mse = 0.1; }))
    recs.push_back(r);
  for (auto& r : layer("fc3", "linear", [](auto& v) { fmt_of(v[0], StatFormat::bf16).overflow = 2; }))
    recs.push_back(r);
  for (auto& r : layer("head", "head")) recs.push_back(r);
  recs.push_back(rec("ln", "layer_norm", Role::activation));  // not a Linear: not advised
  const auto a = advise_layers(recs);
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a[0].module, "fc1");
  EXPECT_EQ(fp8_layer_rules(a), "fc2=bf16,fc3=fp32,head=bf16,*=fp8");
  EXPECT_EQ(bf16_layer_rules(a), "fc3=fp32");
  // No layer fits fp8: no fp8 rules.
  const auto none = advise_layers(layer("head", "head"));
  EXPECT_EQ(fp8_layer_rules(none), "");
  EXPECT_EQ(bf16_layer_rules(none), "");
}

TEST(Advisor, StatisticsWithoutLinearOutputsAreAnError) {
  const std::string e = test::error_of<InspectError>(
      [] { advise_layers({rec("ln", "layer_norm", Role::activation)}); });
  EXPECT_NE(e.find("roles=activation"), std::string::npos) << e;
  EXPECT_THROW(advise_layers({}), InspectError);
}

}  // namespace
}  // namespace mixp::inspect
