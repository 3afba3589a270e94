// The Trainer end to end through the library: it learns (mlp on Fashion-MNIST, gpt on a generated
// corpus), resuming is bit-identical, gradient accumulation equals the large batch, the NaN guard
// stops with the step, and checkpoints that do not fit are refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "mixp/io/safetensors.h"
#include "mixp/nn/module.h"
#include "mixp/tensor/allocator.h"
#include "mixp/train/checkpoint.h"
#include "mixp/train/trainer.h"
#include "resume_check.h"
#include "train_test_util.h"

namespace mixp::train {
namespace {

using testing::expect_resume_identical;
using testing::TempDir;

TrainConfig small_mlp(const std::string& data = kSyntheticData) {
  TrainConfig c;
  c.model.name = "mlp";
  c.data = data;
  c.train_limit = 512;
  c.test_limit = 256;
  c.batch = 32;
  c.seed = 3;
  c.threads = 1;  // bit-identity across trainers needs the same reduction order
  return c;
}

TrainConfig tiny_gpt() {
  TrainConfig c = testing::small_gpt("fp32", /*layers=*/1);
  c.test_limit = 32;  // validation windows
  return c;
}

// Every parameter and buffer as raw bytes, by name.
std::vector<std::pair<std::string, std::vector<std::byte>>> weights(nn::Module& m) {
  std::vector<std::pair<std::string, std::vector<std::byte>>> out;
  for (const auto& t : module_state(m).tensors) out.emplace_back(t.name, t.data);
  return out;
}

TEST(Trainer, MlpLearnsFashionMnist) {
  if (!testing::have_fashion_mnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  TrainConfig c = small_mlp(kFashionMnistData);
  c.train_limit = 6000;
  c.test_limit = 1000;
  c.batch = 128;
  c.epochs = 1;
  Trainer t(c);
  const TrainResult r = t.fit();
  EXPECT_EQ(r.steps, 47);  // ceil(6000 / 128)
  ASSERT_TRUE(r.test_accuracy.has_value());
  // Measured 0.78-0.82 over seeds 0-5 (0.817 for this seed); 10 classes, chance is 0.1.
  EXPECT_GT(*r.test_accuracy, 0.74);
  EXPECT_LT(r.final_loss, r.losses.front());
  EXPECT_GT(r.ms_per_step, 0);
  EXPECT_GT(r.samples_per_s, 0);
  EXPECT_GT(r.peak_memory_bytes, 0);
  EXPECT_EQ(r.energy_source == "rapl", r.energy_joules.has_value());
}

TEST(Trainer, GptLossFallsOnGeneratedText) {
  TrainConfig c = tiny_gpt();
  c.steps = 60;
  Trainer t(c);
  const TrainResult r = t.fit();
  ASSERT_EQ(r.losses.size(), 60u);
  ASSERT_TRUE(r.val_loss.has_value());
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i)
    first += r.losses[size_t(i)] / 5, last += r.losses[size_t(55 + i)] / 5;
  // Uniform over the ~30-character vocabulary is ln 30 = 3.4; the sentences are very regular.
  EXPECT_LT(last, first - 0.8) << "first " << first << " last " << last;
  EXPECT_LT(*r.val_loss, first);
  EXPECT_GT(r.tokens_per_s, 0);
}

TEST(Trainer, ResumeIsBitIdenticalMlpAcrossAnEpochBoundary) {
  TrainConfig c = small_mlp();
  c.grad_accum = 2;
  c.clip = 1.0;
  expect_resume_identical(c, 5);  // 512/32 = 16 micro-batches = 8 steps per epoch: crosses it
}

TEST(Trainer, ResumeIsBitIdenticalAtAnEpochEnd) {
  TrainConfig c = small_mlp();
  c.train_limit = 100;  // 4 micro-batches of 32, the last one short (4 samples)
  expect_resume_identical(c, 4);
}

TEST(Trainer, ResumeIsBitIdenticalGpt) {
  expect_resume_identical(tiny_gpt(), 4);
}

TEST(Trainer, ResumeIsBitIdenticalCnnWithSgd) {
  TrainConfig c = small_mlp();
  c.model.name = "cnn";
  c.optimizer = "sgd";
  c.lr = 0.01;
  c.train_limit = 128;
  expect_resume_identical(c, 2);
}

TEST(Trainer, GradAccumulationEqualsTheLargeBatch) {
  TrainConfig big = small_mlp();
  big.batch = 64;
  big.steps = 3;
  big.evaluate = false;
  TrainConfig acc = big;
  acc.batch = 16;
  acc.grad_accum = 4;
  Trainer tb(big), ta(acc);
  const TrainResult rb = tb.fit(), ra = ta.fit();
  for (size_t i = 0; i < rb.losses.size(); ++i) {
    EXPECT_NEAR(ra.losses[i], rb.losses[i], 1e-5 * std::abs(rb.losses[i])) << "step " << i + 1;
  }
  // Same samples, same update; only the fp32 summation order of the gradients differs.
  const auto wb = weights(tb.model()), wa = weights(ta.model());
  for (size_t i = 0; i < wb.size(); ++i) {
    const auto* x = reinterpret_cast<const float*>(wb[i].second.data());
    const auto* y = reinterpret_cast<const float*>(wa[i].second.data());
    const size_t n = wb[i].second.size() / sizeof(float);
    double max_diff = 0;
    for (size_t k = 0; k < n; ++k) max_diff = std::max(max_diff, double(std::abs(x[k] - y[k])));
    // Adam moves each weight by about lr = 1e-3 per step; summation-order noise is far below.
    EXPECT_LT(max_diff, 2e-5) << wb[i].first;
  }
}

TEST(Trainer, NanGuardNamesTheStep) {
  TrainConfig c = small_mlp();
  c.lr = 1e30;  // the first update destroys the weights; the second step's loss is not finite
  c.optimizer = "sgd";
  c.momentum = 0;
  c.steps = 5;
  TempDir dir;
  c.save_dir = (dir / "ckpt").string();
  Trainer t(c);
  try {
    t.fit();
    FAIL() << "expected the NaN guard to stop the run";
  } catch (const TrainError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("step 2"), std::string::npos) << m;
    EXPECT_TRUE(m.find("loss") != std::string::npos || m.find("gradient") != std::string::npos)
        << m;
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "ckpt"));
}

TEST(Trainer, CheckpointOfAnotherShapeIsRefusedByName) {
  TempDir dir;
  TrainConfig c = small_mlp();
  c.steps = 1;
  c.evaluate = false;
  c.save_dir = (dir / "ckpt").string();
  Trainer(c).fit();

  TrainConfig other = small_mlp();
  other.model.width = 64;
  other.resume_dir = (dir / "ckpt").string();
  // The configuration is compared first: the flag that differs is named.
  try {
    Trainer t(other);
    FAIL() << "expected a shape mismatch";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--width 64 does not match checkpoint"), std::string::npos) << m;
    EXPECT_NE(m.find("shape"), std::string::npos) << m;
  }
  // A checkpoint whose state.json says width 64 but whose tensors are not: the tensor is named.
  const auto state_file = dir / "ckpt" / kStateFile;
  const std::string state_text = mixp::test::read_text(state_file);
  {
    auto state = nlohmann::json::parse(state_text);
    state["config"]["model"]["width"] = 64;
    std::ofstream(state_file) << state.dump(2);
  }
  seal_checkpoint(dir / "ckpt");  // changed on purpose: the manifest would refuse it first
  try {
    Trainer t(other);
    FAIL() << "expected a shape mismatch";
  } catch (const TrainError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("shape"), std::string::npos) << m;
    EXPECT_NE(m.find("'"), std::string::npos) << m;  // names the tensor
  }

  // A missing tensor: drop one from the file.
  std::ofstream(state_file) << state_text;
  auto f = read_safetensors(dir / "ckpt" / kModelFile);
  const std::string dropped = f.tensors.back().name;
  f.tensors.pop_back();
  write_safetensors(dir / "ckpt" / kModelFile, f);
  seal_checkpoint(dir / "ckpt");
  TrainConfig same = small_mlp();
  same.resume_dir = (dir / "ckpt").string();
  try {
    Trainer t(same);
    FAIL() << "expected a missing tensor";
  } catch (const TrainError& e) {
    EXPECT_NE(std::string(e.what()).find("'" + dropped + "'"), std::string::npos) << e.what();
  }
}

TEST(Trainer, EvaluateCheckpointMatchesTheTrainer) {
  TempDir dir;
  TrainConfig c = small_mlp();
  c.steps = 4;
  c.save_dir = (dir / "ckpt").string();
  Trainer t(c);
  const TrainResult r = t.fit();
  const EvalResult e = evaluate_checkpoint(dir / "ckpt");
  ASSERT_TRUE(e.accuracy && r.test_accuracy);
  EXPECT_EQ(*e.accuracy, *r.test_accuracy);
  EXPECT_EQ(e.loss, *r.test_loss);
  const EvalResult e64 = evaluate_checkpoint(dir / "ckpt", "fp64");
  EXPECT_NEAR(*e64.accuracy, *e.accuracy, 0.01);
  EXPECT_NEAR(e64.loss, e.loss, 1e-4);
}

TEST(Trainer, StepsAllocateNothingFromTheSystemAfterWarmup) {
  TrainConfig c = small_mlp();
  c.steps = 100;
  Trainer t(c);
  t.train_steps(2);  // the first steps fill the caching allocator and oneDNN's caches
  const int64_t before = allocator_stats().system_allocs;
  t.train_steps(5);  // within the first epoch: every batch has the same shape
  EXPECT_EQ(allocator_stats().system_allocs, before);
}

TEST(Trainer, Fp64Trains) {
  TrainConfig c = small_mlp();
  c.precision = "fp64";
  c.steps = 3;
  Trainer t(c);
  for (const auto& [name, p] : t.model().named_parameters())
    EXPECT_EQ(p.dtype(), DType::fp64) << name;
  const TrainResult r = t.fit();
  EXPECT_EQ(r.precision, "fp64");
  EXPECT_TRUE(std::isfinite(r.final_loss));
}

}  // namespace
}  // namespace mixp::train
