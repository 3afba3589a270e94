// TrainConfig resolution and JSON, recipes, metrics (median, RAPL wraparound), the JSONL log line.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "mixp/train/callbacks.h"
#include "mixp/train/metrics.h"
#include "mixp/train/recipe.h"
#include "mixp/train/train_config.h"
#include "train_test_util.h"

namespace mixp::train {
namespace {

using testing::TempDir;

std::string config_error(const TrainConfig& c) {
  try {
    (void)c.resolved();
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a ConfigError";
  return "";
}

TEST(TrainConfig, ResolvesModelDefaults) {
  TrainConfig c;
  c.model.name = "mlp";
  c.seed = 7;
  const TrainConfig r = c.resolved();
  EXPECT_EQ(r.batch, 128);
  EXPECT_DOUBLE_EQ(r.lr, 1e-3);
  EXPECT_EQ(r.epochs, 1);
  EXPECT_EQ(r.data, kFashionMnistData);
  EXPECT_EQ(r.model.seed, 7u);
  c.model.name = "gpt";
  const TrainConfig g = c.resolved();
  EXPECT_EQ(g.batch, 16);
  EXPECT_DOUBLE_EQ(g.lr, 3e-4);
  EXPECT_EQ(g.data, "/usr/share/games/fortunes");
}

TEST(TrainConfig, RejectsBadValuesWithClearMessages) {
  TrainConfig c;
  c.model.name = "mlp";
  c.epochs = 2;
  c.steps = 10;
  EXPECT_NE(config_error(c).find("give one"), std::string::npos);
  c.steps = 0;
  c.batch = -1;
  EXPECT_NE(config_error(c).find("batch size must be positive"), std::string::npos);
  c.batch = 0;
  c.optimizer = "lion";
  const std::string m = config_error(c);
  EXPECT_NE(m.find("unknown optimizer 'lion'"), std::string::npos) << m;
  EXPECT_NE(m.find("adamw, adam, sgd"), std::string::npos) << m;
  c.optimizer = "adamw";
  c.model.name = "resnet";
  const std::string m2 = config_error(c);
  EXPECT_NE(m2.find("unknown model 'resnet'"), std::string::npos) << m2;
  EXPECT_NE(m2.find("mlp"), std::string::npos) << m2;
  c.model.name = "mlp";
  c.grad_accum = 0;
  EXPECT_NE(config_error(c).find("gradient accumulation"), std::string::npos);
}

TEST(TrainConfig, JsonRoundTripIsExact) {
  TrainConfig c;
  c.model.name = "gpt";
  c.model.width = 64;
  c.model.context = 32;
  c.model.vocab = 88;
  c.lr = 0.1 + 0.2;  // not exactly representable in decimal: must survive bit for bit
  c.weight_decay = 1.0 / 3.0;
  c.loss_scale_init = 65536;
  c.seed = 0xFFFFFFFFFFFFFFFFull;
  c.steps = 17;
  c.save_dir = "a b/c";
  const TrainConfig r = config_from_json(config_to_json(c));
  EXPECT_EQ(r.model.name, "gpt");
  EXPECT_EQ(r.model.width, 64);
  EXPECT_EQ(r.model.context, 32);
  EXPECT_EQ(r.model.vocab, 88);
  EXPECT_EQ(r.lr, c.lr);
  EXPECT_EQ(*r.weight_decay, *c.weight_decay);
  EXPECT_EQ(*r.loss_scale_init, 65536);
  EXPECT_FALSE(r.growth_interval.has_value());
  EXPECT_EQ(r.seed, c.seed);
  EXPECT_EQ(r.steps, 17);
  EXPECT_EQ(r.save_dir, "a b/c");
  EXPECT_THROW(config_from_json("[1, 2]"), ConfigError);
  EXPECT_THROW(config_from_json("{\"lr\": \"fast\"}"), ConfigError);
}

TEST(Recipe, AvailableAndPlanned) {
  EXPECT_EQ(make_recipe("fp32")->param_dtype(), DType::fp32);
  EXPECT_EQ(make_recipe("fp64")->param_dtype(), DType::fp64);
  EXPECT_EQ(make_recipe("fp32")->loss_scale(), 1.0);
  EXPECT_EQ(make_recipe("bf16-pure")->param_dtype(), DType::bf16);
  EXPECT_EQ(make_recipe("fp16")->loss_scale(), 65536.0);
  // Every planned recipe is available: no "not available yet" path is left.
  EXPECT_EQ(available_recipes(), planned_recipes());
  EXPECT_EQ(make_recipe("fp8")->name(), "fp8");
  EXPECT_EQ(make_recipe("int8-qat")->param_dtype(), DType::fp32);
  try {
    make_recipe("fp12");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "unknown precision 'fp12'; available: fp64, fp32, tf32, bf16, bf16-pure, fp16, "
                  "fp16-o2, fp16-pure, fp8, fp8-current, mxfp8, fp8-block, nvfp4, mxfp4, int8-qat, "
                  "int4-qat, int2-qat, "
                  "ternary, binary, binary-act, qlora-nf4, qlora-int4, auto"),
              std::string::npos);
  }
  try {
    RecipeOptions lp;
    lp.layer_precision = "attn=bf16";
    make_recipe("fp64", lp);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("needs a recipe below fp64"), std::string::npos);
  }
  RecipeOptions ls;
  ls.loss_scale_init = 1024.0;
  EXPECT_THROW(make_recipe("fp32", ls), ConfigError);
  EXPECT_EQ(make_recipe("fp16", ls)->loss_scale(), 1024.0);
  RecipeOptions gi;
  gi.growth_interval = 100;
  EXPECT_THROW(make_recipe("fp64", gi), ConfigError);
  EXPECT_THROW(make_recipe("bf16", gi), ConfigError);
}

TEST(Metrics, MedianExcludesTheFirstStep) {
  StepTimes t;
  EXPECT_EQ(t.median_ms(), 0);
  t.add(100);
  EXPECT_EQ(t.median_ms(), 100);  // the only step
  t.add(3);
  t.add(5);
  t.add(4);
  EXPECT_EQ(t.median_ms(), 4);
  t.add(6);
  EXPECT_EQ(t.median_ms(), 4.5);
  EXPECT_EQ(t.total_ms(), 118);
  EXPECT_GT(peak_rss_bytes(), 1 << 20);
}

TEST(JsonlLog, OneObjectPerLineWithTheContractFields) {
  TempDir dir;
  const auto path = dir / "log.jsonl";
  std::ofstream(path) << "old content\n";
  {
    JsonlLogCallback log(path);  // created fresh
    StepInfo s;
    s.step = 1;
    s.loss = 2.5;
    s.grad_norm = 0.75;
    s.lr = 1e-3;
    log.on_step_end(s);
    s.step = 2;
    s.loss = NAN;  // JSON has no NaN: null
    log.on_step_end(s);
    // Flushed per line: readable before the callback is destroyed.
    const std::string text = testing::read_text(path);
    EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2);
  }
  std::ifstream in(path);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    for (const char* k : {"step", "loss", "loss_scale", "skipped", "grad_norm", "lr"}) {
      EXPECT_TRUE(j.contains(k)) << k << " missing in " << line;
    }
    EXPECT_EQ(j["step"], n + 1);
    EXPECT_EQ(j["loss_scale"], 1.0);
    EXPECT_EQ(j["skipped"], false);
    if (n == 1) {
      EXPECT_TRUE(j["loss"].is_null());
    }
    ++n;
  }
  EXPECT_EQ(n, 2);
  EXPECT_THROW(JsonlLogCallback(dir / "no" / "such" / "dir.jsonl"), std::runtime_error);
}

}  // namespace
}  // namespace mixp::train
