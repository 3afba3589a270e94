// Training with LoRA (TrainConfig::lora, docs/lora.md): the base stays bit for bit what it was,
// only the adapters train and hold optimizer state, under fp32, bf16, fp16 (loss scaling) and
// fp8 (the frozen base GEMMs in FP8); resume is bit-identical; the CLI refuses a pattern that
// matches nothing with the model's Linear names.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "mixp/amp/fp8_linear.h"
#include "mixp/nn/linear.h"
#include "mixp/nn/lora.h"
#include "mixp/optim/optimizer.h"
#include "mixp/train/trainer.h"
#include "train/resume_check.h"
#include "train/train_test_util.h"

namespace mixp::train {
namespace {

using testing::small_gpt;

constexpr const char* kLora = "r=4,alpha=8,dropout=0.1,targets=qkv,fc";

void expect_only_adapters_train(const std::string& precision) {
  TrainConfig c = small_gpt(precision);
  c.lora = kLora;
  c.steps = 4;
  c.evaluate = false;
  Trainer t(c);
  std::map<std::string, std::vector<double>> before;
  for (const auto& [name, p] : t.model().named_parameters()) before[name] = p.to_double_vector();
  const TrainResult r = t.fit();
  for (double l : r.losses) EXPECT_TRUE(std::isfinite(l)) << precision;
  int adapters = 0;
  for (const auto& [name, p] : t.model().named_parameters()) {
    const bool adapter = name.find(".lora_") != std::string::npos;
    if (adapter) {
      ++adapters;
      if (name.find("lora_B") != std::string::npos)
        EXPECT_NE(p.to_double_vector(), before[name]) << precision << " " << name << " did not train";
    } else {
      EXPECT_EQ(p.to_double_vector(), before[name]) << precision << " " << name << " changed";
    }
  }
  EXPECT_EQ(adapters, 8);  // 2 layers x (qkv, fc) x (A, B)
  // The optimizer has the adapters only, and state for them only.
  EXPECT_EQ(t.optimizer().params().size(), 8u) << precision;
  for (const auto& [name, s] : t.optimizer().state_dict().tensors)
    EXPECT_NE(name.find(".lora_"), std::string::npos) << precision << " state " << name;
  if (precision == "fp8") {
    // The frozen base GEMMs run in FP8; the adapters are not FP8 layers.
    auto& qkv = dynamic_cast<nn::Linear&>(t.model().module("blocks.0.attn.qkv"));
    EXPECT_NE(amp::fp8_meta(qkv), nullptr);
    EXPECT_EQ(amp::fp8_meta(*nn::lora_adapter_of(qkv).a), nullptr);
  }
}

TEST(LoraTrain, Fp32TrainsOnlyTheAdapters) { expect_only_adapters_train("fp32"); }
TEST(LoraTrain, Bf16TrainsOnlyTheAdapters) { expect_only_adapters_train("bf16"); }
TEST(LoraTrain, Fp16WithLossScalingTrainsOnlyTheAdapters) { expect_only_adapters_train("fp16"); }
TEST(LoraTrain, Fp8BaseTrainsOnlyTheAdapters) { expect_only_adapters_train("fp8"); }

TEST(LoraTrain, ResumeIsBitIdentical) {
  TrainConfig c = small_gpt("bf16");
  c.lora = kLora;  // dropout on: its mask streams are part of the checkpoint
  testing::expect_resume_identical(c, 3);
}

TEST(LoraTrain, CliRefusesAPatternThatMatchesNothing) {
  const auto r = testing::run_cli(
      "train --model gpt --width 32 --layers 1 --heads 2 --context 16 --data synthetic "
      "--train-limit 5000 --steps 1 --threads 1 --lora r=4,targets=q_proj");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("mixp train: error: --lora: target 'q_proj' matches no Linear layer"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("blocks.0.attn.qkv"), std::string::npos) << r.err;
  const auto bad = testing::run_cli(
      "train --model gpt --data synthetic --steps 1 --lora r=4,alpha=0,targets=qkv");
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("alpha=0 must be > 0"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace mixp::train
