// The recipes end to end: every recipe trains; fp16 gradients underflow without loss scaling and
// train with it (the SSD finding of Micikevicius et al. 2018, made small); bf16-pure with
// stochastic rounding beats round-to-nearest where small updates vanish; a bf16 gpt step holds
// less memory than fp32; resume is bit-identical with the scaler state and master weights;
// skipped steps do not advance the schedule and are logged.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "mixp/amp/autocast.h"
#include "mixp/amp/grad_scaler.h"
#include "mixp/io/safetensors.h"
#include "mixp/nn/linear.h"
#include "mixp/nn/sequential.h"
#include "mixp/ops/ops.h"
#include "mixp/optim/adam.h"
#include "mixp/tensor/factories.h"
#include "mixp/train/checkpoint.h"
#include "mixp/train/recipe.h"
#include "mixp/train/trainer.h"
#include "train/resume_check.h"
#include "train/train_test_util.h"

namespace mixp::train {
namespace {

using ::testing::HasSubstr;
using testing::expect_resume_identical;
using testing::small_mlp;
using testing::TempDir;

TrainConfig tiny_gpt(const std::string& precision) {
  TrainConfig c = testing::small_gpt(precision);
  c.model.mlp_width = 64;
  c.test_limit = 16;
  return c;
}

TEST(Recipes, EveryRecipeTrainsTheMlp) {
  for (const std::string p : {"fp64", "fp32", "tf32", "bf16", "fp16", "fp16-o2", "fp16-pure",
                              "bf16-pure", "auto", "bf16:params=fp32,compute=bf16,output=fp32"}) {
    SCOPED_TRACE(p);
    TrainConfig c = small_mlp(p);
    c.steps = 32;
    Trainer t(c);
    const TrainResult r = t.fit();
    double first = 0, last = 0;
    for (int i = 0; i < 4; ++i)
      first += r.losses[size_t(i)] / 4, last += r.losses[size_t(28 + i)] / 4;
    EXPECT_LT(last, 0.5 * first) << "first " << first << " last " << last;
    ASSERT_TRUE(r.test_accuracy.has_value());
    EXPECT_GT(*r.test_accuracy, 0.8);
    EXPECT_EQ(r.skipped_steps, 0);
    EXPECT_FALSE(r.recipe.empty());
    if (p == "auto") {
      EXPECT_EQ(r.precision, amp::auto_preset());
    }
  }
}

TEST(Recipes, ParametersAndOptimizerFollowTheRecipe) {
  {
    Trainer t(small_mlp("bf16-pure"));
    EXPECT_EQ(t.model().parameter("fc1.weight").dtype(), DType::bf16);
    EXPECT_FALSE(t.optimizer().params()[0].master.defined());
    EXPECT_EQ(t.optimizer().params()[0].slots[0].dtype(), DType::bf16);
    EXPECT_EQ(t.optimizer().precision().write_back, Round::stochastic);
  }
  {
    Trainer t(small_mlp("fp16-o2"));
    EXPECT_EQ(t.model().parameter("fc1.weight").dtype(), DType::fp16);
    EXPECT_TRUE(t.optimizer().params()[0].master.defined());
    EXPECT_EQ(t.optimizer().params()[0].slots[0].dtype(), DType::fp32);
  }
  {
    TrainConfig c = small_mlp("bf16-pure");
    c.layer_precision = "head=fp32";
    Trainer t(c);
    EXPECT_EQ(t.model().parameter("head.weight").dtype(), DType::fp32);
    EXPECT_EQ(t.model().parameter("fc2.weight").dtype(), DType::bf16);
  }
  {
    Trainer t(small_mlp("bf16"));
    EXPECT_EQ(t.model().parameter("fc1.weight").dtype(), DType::fp32);
    EXPECT_EQ(t.recipe().loss_scale(), 1.0);
  }
}

// A classifier whose loss carries a small weight (2e-6, as a term of a multi-task loss might):
// Adam is invariant to the gradients' scale, so fp32 trains as with weight 1, but the gradient
// of the logits (2e-6 * (p - y) / 256, below 1e-8) is under half of fp16's smallest subnormal
// (6e-8) and flushes to zero where it enters the fp16 activations of an Autocast(fp16) forward:
// nothing below the loss learns. Scaled by 2^16 it is ~5e-4, comfortably inside fp16's range.
constexpr double kLossWeight = 2e-6;
struct UnderflowRun {
  double first_loss = 0, last_loss = 0;
  double zero_grad_fraction = 0;  // of fc1's weight gradient after the first backward
};

UnderflowRun run_underflow_model(bool fp16, bool scaled) {
  Generator gen(12);
  auto model = std::make_shared<nn::Sequential>();
  model->add("fc1", std::make_shared<nn::Linear>(
                        32, 64, gen, nn::LinearOptions{.activation = Activation::relu}));
  model->add("fc2", std::make_shared<nn::Linear>(
                        64, 64, gen, nn::LinearOptions{.activation = Activation::relu}));
  model->add("head", std::make_shared<nn::Linear>(64, 4, gen));
  // Data: 4 classes from a fixed random teacher.
  Generator dg(5);
  const Tensor x = randn({256, 32}, dg);
  const Tensor teacher = randn({32, 4}, dg);
  const Tensor scores = matmul(x, teacher);
  std::vector<int64_t> labels(256);
  for (int64_t i = 0; i < 256; ++i) {
    int64_t best = 0;
    for (int64_t k = 1; k < 4; ++k)
      if (scores.at({i, k}) > scores.at({i, best})) best = k;
    labels[size_t(i)] = best;
  }
  const Tensor y = from_vector(labels, {256});
  optim::Adam opt(model->named_parameters(), {.lr = 3e-3, .eps = 1e-14});
  amp::GradScaler scaler({.enabled = scaled});
  UnderflowRun r;
  for (int step = 0; step < 60; ++step) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::Autocast ac(DType::fp16, fp16);
      loss = cross_entropy((*model)(x), y);
    }
    if (step == 0) r.first_loss = loss.item();
    r.last_loss = loss.item();
    scaler.scale(mul(loss, kLossWeight)).backward();
    scaler.unscale_(opt);
    if (step == 0) {
      const std::vector<double> g = model->parameter("fc1.weight").grad().to_vector();
      r.zero_grad_fraction = double(std::count(g.begin(), g.end(), 0.0)) / double(g.size());
    }
    scaler.step(opt);
    scaler.update();
  }
  return r;
}

TEST(Recipes, Fp16GradientsUnderflowWithoutLossScalingAndTrainWithIt) {
  const UnderflowRun fp32 = run_underflow_model(false, false);
  const UnderflowRun bare = run_underflow_model(true, false);
  const UnderflowRun scaled = run_underflow_model(true, true);
  // fp32: no gradient is zero (ReLU units dead on every sample aside) and the loss falls.
  EXPECT_LT(fp32.zero_grad_fraction, 0.05);
  EXPECT_LT(fp32.last_loss, 0.5 * fp32.first_loss);
  // fp16 without scaling: the lower layer's gradients vanish.
  EXPECT_GT(bare.zero_grad_fraction, 0.9) << "fp16 gradients should flush to zero";
  EXPECT_GT(bare.last_loss, 0.8 * bare.first_loss);
  // fp16 with the GradScaler trains like fp32.
  EXPECT_LT(scaled.zero_grad_fraction, 0.05);
  EXPECT_LT(scaled.last_loss, 0.5 * scaled.first_loss);
  EXPECT_NEAR(scaled.last_loss, fp32.last_loss, 0.1 * fp32.first_loss);
}

// Linear regression in pure bf16 with Adam at a learning rate whose steps (1e-3) are below half
// a bf16 ulp of the weights (2^-8 near 1): round-to-nearest drops them, stochastic rounding keeps
// them on average.
double bf16_pure_regression(const std::string& recipe) {
  RecipeOptions ro;
  ro.seed = 9;
  const auto rec = make_recipe(recipe, ro);
  Generator gen(4);
  const int64_t in = 64, n = 512;
  const Tensor x = randn({n, in}, gen).to(DType::bf16, Round::nearest_even);
  const Tensor w_true = uniform({in, 1}, 1.1, 1.3, gen);
  const Tensor y = matmul(x.to(DType::fp32), w_true);
  Tensor w = ones({in, 1}, {.dtype = DType::bf16}).requires_grad_();
  optim::Adam opt(optim::NamedTensors{{"w", w}},
                  {.lr = 1e-3, .precision = rec->optimizer_precision()});
  double last = 0;
  for (int step = 0; step < 400; ++step) {
    opt.zero_grad();
    const Tensor loss = mse_loss(matmul(x, w).to(DType::fp32), y);
    last = loss.item();
    loss.backward();
    opt.step();
  }
  return last;
}

TEST(Recipes, Bf16PureStochasticRoundingBeatsNearest) {
  const double stochastic = bf16_pure_regression("bf16-pure");
  const double nearest = bf16_pure_regression("bf16-pure:rounding=nearest,states=fp32");
  const double kahan = bf16_pure_regression("bf16-pure:rounding=nearest,kahan=on");
  // Starting from 1 the weights must travel 0.1-0.3 (400 steps of at most ~1e-3 suffice in
  // fp32); with nearest rounding no step lands (1 + 1e-3 rounds back to 1: the ulp is 2^-7).
  EXPECT_LT(stochastic, 0.2 * nearest) << "stochastic " << stochastic << " nearest " << nearest;
  EXPECT_LT(kahan, 0.2 * nearest) << "kahan " << kahan << " nearest " << nearest;
}

TEST(Recipes, Bf16GptStepHoldsLessMemoryThanFp32) {
  std::map<std::string, int64_t> peak;
  for (const std::string p : {"fp32", "bf16", "bf16-pure"}) {
    TrainConfig c = tiny_gpt(p);
    c.model.width = 64;
    c.model.mlp_width = 256;
    c.model.context = 64;
    c.batch = 16;
    c.steps = 2;
    c.evaluate = false;
    Trainer t(c);
    peak[p] = t.fit().peak_memory_bytes;
  }
  EXPECT_LT(peak["bf16"], peak["fp32"]);
  EXPECT_LT(peak["bf16-pure"], peak["bf16"]);
  RecordProperty("peak_fp32", std::to_string(peak["fp32"]));
  RecordProperty("peak_bf16", std::to_string(peak["bf16"]));
  RecordProperty("peak_bf16_pure", std::to_string(peak["bf16-pure"]));
}

TEST(Recipes, ResumeIsBitIdenticalFp16WithSkippedStepsAndGrowth) {
  TrainConfig c = small_mlp("fp16");
  c.loss_scale_init = 1e30;  // the first steps overflow and back off
  c.growth_interval = 3;     // and the scale grows again within the run
  c.grad_accum = 2;
  c.clip = 1.0;
  TempDir dir;
  TrainConfig probe = c;
  probe.steps = 8;
  probe.evaluate = false;
  Trainer t(probe);
  const TrainResult r = t.fit();
  EXPECT_GT(r.skipped_steps, 0);
  expect_resume_identical(c, 4);
  c.loss_scale_init.reset();
  expect_resume_identical(c, 3);
}

TEST(Recipes, ResumeIsBitIdenticalBf16PureAndO2) {
  expect_resume_identical(small_mlp("bf16-pure"), 3);
  expect_resume_identical(small_mlp("fp16-o2"), 3);
  expect_resume_identical(small_mlp("bf16-pure:rounding=nearest,kahan=on"), 3);
  TrainConfig g = tiny_gpt("bf16");
  g.model.checkpointing = true;
  expect_resume_identical(g, 2);
}

TEST(Recipes, SkippedStepsAreLoggedAndDoNotAdvanceTheSchedule) {
  TempDir dir;
  TrainConfig c = small_mlp("fp16");
  c.loss_scale_init = std::ldexp(1.0, 24);  // backs off for a few steps
  c.schedule = "linear";
  c.warmup_steps = 4;
  c.steps = 12;
  c.evaluate = false;
  c.log_path = (dir / "log.jsonl").string();
  Trainer t(c);
  t.add_callback(std::make_shared<JsonlLogCallback>(c.log_path));
  const TrainResult r = t.fit();
  ASSERT_GT(r.skipped_steps, 0);
  std::ifstream in(c.log_path);
  std::string line;
  std::vector<nlohmann::json> rows;
  while (std::getline(in, line)) rows.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(rows.size(), 12u);
  int64_t skipped = 0;
  double expect_scale = std::ldexp(1.0, 24);
  int64_t taken = 0;
  for (const auto& row : rows) {
    // loss_scale is the scale this step's loss was multiplied by (fp32, as the scaler holds it).
    EXPECT_EQ(row["loss_scale"].get<double>(), double(float(expect_scale)));
    const bool s = row["skipped"].get<bool>();
    skipped += s;
    EXPECT_EQ(row["skipped_steps"].get<int64_t>(), skipped);
    // The warmup counts taken steps: lr = base * (taken + 1) / 4.
    if (taken < 4) {
      EXPECT_DOUBLE_EQ(row["lr"].get<double>(), 1e-3 * double(taken + 1) / 4.0);
    }
    if (s) {
      EXPECT_TRUE(row["grad_norm"].is_null());
      expect_scale = double(float(expect_scale)) * 0.5;
    } else {
      ++taken;
    }
  }
  EXPECT_EQ(skipped, r.skipped_steps);
}

TEST(Recipes, CollapsedLossScaleStopsWithAClearError) {
  // An absurd learning rate makes the weights NaN: every later step has NaN gradients, the scale
  // falls to its minimum (1) and stays there.
  TrainConfig c = small_mlp("fp16");
  c.lr = 1e30;
  c.optimizer = "sgd";
  c.momentum = 0;
  c.loss_scale_init = 4.0;
  c.steps = 100;
  Trainer t(c);
  try {
    t.fit();
    FAIL() << "expected the collapse error";
  } catch (const TrainError& e) {
    EXPECT_THAT(e.what(), HasSubstr("the loss scale has collapsed"));
    EXPECT_THAT(e.what(), HasSubstr("step "));
  }
}

TEST(Recipes, CheckpointingUnderAutocastRecomputesInTheSameDtypes) {
  for (const std::string p : {"bf16", "fp16", "tf32"}) {
    SCOPED_TRACE(p);
    TrainConfig a = tiny_gpt(p);
    a.steps = 3;
    a.evaluate = false;
    TrainConfig b = a;
    b.model.checkpointing = true;
    Trainer ta(a), tb(b);
    const TrainResult ra = ta.fit(), rb = tb.fit();
    for (size_t i = 0; i < ra.losses.size(); ++i)
      EXPECT_NEAR(ra.losses[i], rb.losses[i], 1e-6 * ra.losses[i]) << "step " << i + 1;
  }
}

TEST(Recipes, LossScaleOptionsNeedDynamicScaling) {
  TrainConfig c = small_mlp("bf16");
  c.loss_scale_init = 1024;
  EXPECT_THAT([&] { Trainer t(c); },
              ::testing::ThrowsMessage<ConfigError>(HasSubstr("bf16 has fp32's exponent range")));
  // An fp16 layer in a bf16 recipe turns dynamic scaling on.
  c.layer_precision = "fc1=fp16";
  Trainer t(c);
  EXPECT_EQ(t.recipe().loss_scale(), 1024.0);
  EXPECT_TRUE(t.recipe().skips_nonfinite());
}

}  // namespace
}  // namespace mixp::train
