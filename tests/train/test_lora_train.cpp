// Training with LoRA (TrainConfig::lora, docs/lora.md): the base stays bit for bit what it was,
// only the adapters train and hold optimizer state, under fp32, bf16, fp16 (loss scaling) and
// fp8 (the frozen base GEMMs in FP8); resume is bit-identical; the CLI refuses a pattern that
// matches nothing with the model's Linear names.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "mixp/amp/fp8_linear.h"
#include "mixp/io/safetensors.h"
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
      if (name.find("lora_B") != std::string::npos) {
        EXPECT_NE(p.to_double_vector(), before[name]) << precision << " " << name << " did not train";
      }
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

// Gradient checkpointing with frozen embeddings: the blocks' adapters still get gradients
// (autograd/checkpoint.h's checkpoint_input), the same as without checkpointing.
void expect_checkpointing_changes_nothing(TrainConfig c) {
  c.steps = 3;
  c.evaluate = false;
  Trainer plain(c);
  plain.fit();
  c.model.checkpointing = true;
  Trainer ck(c);
  ck.fit();
  const auto a = plain.model().named_parameters(), b = ck.model().named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(a[i].second.to_double_vector(), b[i].second.to_double_vector()) << a[i].first;
}

TEST(LoraTrain, GradientCheckpointingGivesTheSameAdapters) {
  TrainConfig c = small_gpt("fp32");
  c.lora = kLora;
  expect_checkpointing_changes_nothing(c);
}

TEST(LoraTrain, GradientCheckpointingGivesTheSameAdaptersOnLlama) {
  TrainConfig c = small_gpt("fp32");
  c.model.name = "llama";
  c.model.heads = 4;
  c.model.kv_heads = 2;
  c.lora = "r=4,alpha=8,dropout=0.1,targets=q_proj,v_proj,down_proj";
  expect_checkpointing_changes_nothing(c);
}

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

// --lora-out and the checkpoint write PEFT's files; --lora-from starts from them; `mixp convert`
// of the LoRA checkpoint's model merges the adapters into the base (the hf layout has no place
// for them).
TEST(LoraTrain, CliWritesLoadsAndMergesAdapters) {
  testing::TempDir dir;
  const std::string ck = (dir / "ck").string(), ad = (dir / "ad").string();
  const std::string model =
      "train --model gpt2 --width 32 --layers 1 --heads 2 --context 16 --data synthetic "
      "--train-limit 5000 --threads 1 --no-eval --lr 0.01 ";
  auto r = testing::run_cli(model + "--steps 3 --lora r=2,alpha=4,targets=qkv,mlp.fc --save '" +
                            ck + "' --lora-out '" + ad + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const std::string& d : {ck, ad}) {
    EXPECT_TRUE(std::filesystem::exists(d + "/adapter_model.safetensors")) << d;
    EXPECT_TRUE(std::filesystem::exists(d + "/adapter_config.json")) << d;
  }
  r = testing::run_cli(model + "--steps 1 --json --lora-from '" + ad + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = testing::run_cli(model + "--steps 1 --lora r=2,targets=qkv --lora-from '" + ad + "'");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--lora and --lora-from both given"), std::string::npos) << r.err;
  const std::string merged = (dir / "merged.safetensors").string();
  r = testing::run_cli("convert '" + ck + "/model.safetensors' -o '" + merged + "' --layout hf");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const SafeTensorsFile m = read_safetensors(merged);
  for (const auto& t : m.tensors) EXPECT_EQ(t.name.find("lora"), std::string::npos) << t.name;
  // The merged c_attn ([in, out], Conv1D) is not the frozen base's: B A was added.
  const SafeTensorsFile c = read_safetensors(ck + "/model.safetensors");
  const SafeTensor* base = c.find("blocks.0.attn.qkv.weight");
  const SafeTensor* got = m.find("h.0.attn.c_attn.weight");
  ASSERT_TRUE(base && got);
  ASSERT_EQ(base->dtype, DType::fp32);
  ASSERT_EQ(got->dtype, DType::fp32);
  const auto* w = reinterpret_cast<const float*>(base->data.data());
  const auto* g = reinterpret_cast<const float*>(got->data.data());
  double diff = 0;
  for (int64_t o = 0; o < 96; ++o)
    for (int64_t i = 0; i < 32; ++i) diff = std::max(diff, double(std::fabs(w[o * 32 + i] - g[i * 96 + o])));
  EXPECT_GT(diff, 0.0);
  EXPECT_LT(diff, 0.5);
}

}  // namespace
}  // namespace mixp::train
