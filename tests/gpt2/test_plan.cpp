// The memory planner (study/memory_plan.h, `mixp plan`): the plan of a 4-block gpt2, made from
// 1- and 2-block probes, against the peak and step of the real run; the breakdown per recipe;
// ZeRO sharding; bad options.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "common/cli_runner.h"
#include "common/temp_dir.h"
#include "mixp/data/token_file.h"
#include "mixp/study/memory_plan.h"
#include "mixp/train/trainer.h"

namespace mixp::test {
namespace {

train::TrainConfig tiny(const std::string& precision, bool ckpt = false) {
  train::TrainConfig c;
  c.model = {.name = "gpt2", .width = 64, .layers = 4, .heads = 2, .context = 32};
  c.model.checkpointing = ckpt;
  c.data = train::kSyntheticData;
  c.batch = 4;
  c.precision = precision;
  c.threads = 1;
  c.steps = 2;
  c.evaluate = false;
  return c;
}

int64_t measured_peak(const train::TrainConfig& c) {
  train::Trainer t(c);
  return t.fit().peak_memory_bytes;
}

TEST(MemoryPlan, MatchesTheMeasuredPeakWithin10Percent) {
  for (const auto& [recipe, ckpt] : {std::pair{"fp32", false}, std::pair{"bf16", false},
                                     std::pair{"bf16-pure", false}, std::pair{"bf16", true}}) {
    const train::TrainConfig c = tiny(recipe, ckpt);
    const study::MemoryPlan p = study::plan_memory(c);
    const int64_t real = measured_peak(c);
    EXPECT_NEAR(double(p.peak_bytes), double(real), 0.1 * double(real))
        << recipe << (ckpt ? " + checkpointing" : "");
    ASSERT_EQ(p.probes.size(), 2u);
    EXPECT_EQ(p.probes[0].layers, 1);
    EXPECT_EQ(p.probes[1].layers, 2);
    EXPECT_GT(p.step_ms, 0);
  }
}

TEST(MemoryPlan, ModelsTheOptimizerInBackward) {
  // The probes train with the flag: the plan follows the real run's lower peak; no gradient is
  // persistent.
  for (const auto& [recipe, ckpt] : {std::pair{"fp32", false}, std::pair{"bf16", true}}) {
    train::TrainConfig c = tiny(recipe, ckpt);
    c.optimizer_in_backward = true;
    const study::MemoryPlan p = study::plan_memory(c);
    const int64_t real = measured_peak(c);
    EXPECT_NEAR(double(p.peak_bytes), double(real), 0.1 * double(real))
        << recipe << (ckpt ? " + checkpointing" : "");
    EXPECT_TRUE(p.optimizer_in_backward);
    EXPECT_EQ(p.grad_bytes, 0);
    // Under checkpointing the peak is the first block's backward, which held the later blocks'
    // gradients; fp32's is the head's, before any gradient exists.
    c.optimizer_in_backward = false;
    if (ckpt) {
      EXPECT_LT(real, measured_peak(c)) << recipe;
    }
  }
  train::TrainConfig c = tiny("bf16");
  c.optimizer_in_backward = true;
  EXPECT_THROW(study::plan_memory(c, {.zero_stage = 2, .ranks = 4}), train::ConfigError);
}

TEST(MemoryPlan, BreakdownFollowsTheRecipesFormats) {
  const study::MemoryPlan fp32 = study::plan_memory(tiny("fp32"));
  // The parameters of the full model, counted like the model does (the tied head once).
  train::Trainer t(tiny("fp32"));
  const int64_t P = t.fit().parameters;
  EXPECT_EQ(fp32.parameters, P);
  EXPECT_EQ(fp32.param_bytes, 4 * P);
  EXPECT_EQ(fp32.grad_bytes, 4 * P);
  EXPECT_EQ(fp32.master_bytes, 0);
  EXPECT_EQ(fp32.state_bytes, 8 * P);
  EXPECT_EQ(fp32.cast_copy_bytes, 0);
  const study::MemoryPlan bf16 = study::plan_memory(tiny("bf16"));
  EXPECT_EQ(bf16.param_bytes, 4 * P);
  EXPECT_GT(bf16.cast_copy_bytes, 0);  // autocast's bf16 copies of the GEMM weights
  // Under checkpointing autocast keeps no weight shadows: the copies are not persistent.
  EXPECT_EQ(study::plan_memory(tiny("bf16", true)).cast_copy_bytes, 0);
  const study::MemoryPlan pure = study::plan_memory(tiny("bf16-pure"));
  EXPECT_EQ(pure.param_bytes, 2 * P);
  EXPECT_EQ(pure.state_bytes, 4 * P);
  EXPECT_EQ(pure.master_bytes, 0);
  EXPECT_GT(fp32.step_flops, 6.0 * double(P) * 4 * 32);
}

TEST(MemoryPlan, ZeroStagesShardOverRanks) {
  const study::MemoryPlan one = study::plan_memory(tiny("fp32"));
  const study::MemoryPlan z2 = study::plan_memory(tiny("fp32"), {.zero_stage = 2, .ranks = 4});
  EXPECT_EQ(z2.state_bytes, (one.state_bytes + 3) / 4);
  EXPECT_EQ(z2.grad_bytes, (one.grad_bytes + 3) / 4);
  EXPECT_EQ(z2.param_bytes, one.param_bytes);
  EXPECT_GT(z2.comm_bytes, 0);
  const study::MemoryPlan z3 = study::plan_memory(tiny("fp32"), {.zero_stage = 3, .ranks = 4});
  // Stage 3: each rank's shard (its rows of every parameter: an even quarter), plus what is
  // gathered at the peak (src/train/trainer_zero3.cpp; docs/plan.md), whole on every rank: the
  // root's parameters (the final LayerNorm, 2 x width) and the larger of the tied head's matrix
  // and one block (the head's backward or the last block's). Not the tied head matrix's
  // gradient: ZeRO 3 computes it when backward reaches the token embedding
  // (ops/deferred_weight_grad.h), not at the head's backward.
  ASSERT_EQ(one.probes.size(), 2u);
  const int64_t width = 64, context = 32;
  const int64_t block = one.probes[1].params - one.probes[0].params;
  const int64_t head = one.parameters - one.layers * block - context * width - 2 * width;
  EXPECT_EQ(z3.param_bytes,
            (one.param_bytes + 3) / 4 + (2 * width + std::max(head, block)) * 4);
  EXPECT_EQ(z3.state_bytes, (one.state_bytes + 3) / 4);
  // The ranks own whole parameters (DataParallel::partition): over 16 ranks the largest
  // parameter (a block's 64 x 256 MLP matrix; at GPT-2 124M the tied wte) is more than 1/16 of
  // this model, and the rank that owns it holds that share of the states; the plan is for that
  // rank, the one that runs out first.
  const int64_t largest = std::max(head, width * 4 * width);
  ASSERT_GT(largest * 16, one.parameters);
  const study::MemoryPlan z16 = study::plan_memory(tiny("fp32"), {.zero_stage = 1, .ranks = 16});
  EXPECT_EQ(z16.state_bytes,
            int64_t(std::ceil(double(one.state_bytes) * double(largest) / double(one.parameters))));
  EXPECT_THROW(study::plan_memory(tiny("fp32"), {.zero_stage = 4}), train::ConfigError);
  EXPECT_THROW(study::plan_memory(tiny("fp32"), {.ranks = 0}), train::ConfigError);
}

TEST(MemoryPlan, Cli) {
  const auto r = run_cli(
      "plan --model gpt2 --layers 3 --width 64 --heads 2 --context 32 --batch 4 --data synthetic "
      "--threads 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = r.json();
  for (const char* k :
       {"param_bytes", "grad_bytes", "master_bytes", "state_bytes", "cast_copy_bytes", "comm_bytes",
        "activation_bytes", "peak_bytes", "step_ms", "probes"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
  const auto text = run_cli(
      "plan --model gpt2 --layers 2 --width 64 --heads 2 --context 32 --batch 4 --data synthetic "
      "--threads 1 --precision bf16 --zero-stage 1 --ranks 2");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("optimizer states"), std::string::npos);
  EXPECT_NE(text.out.find("ZeRO stage 1 over 2 ranks"), std::string::npos);
  const auto bad = run_cli("plan --model gpt2 --data synthetic --zero-stage 7");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--zero-stage: must be an integer from 0 to 3"), std::string::npos) << bad.err;
  EXPECT_EQ(run_cli("plan --help").exit_code, 0);
}

// Under checkpointing at GPT-2's vocabulary (issue 28): the plan's peak against a real run's,
// within the 2% docs/plan.md states (measured 0.2% at gpt2 B4 T64), and the text separates what
// the peak's moment holds (the end of backward: the saved activations are gone, so the row is
// small) from what backward keeps (one block input per block plus the head), which
// checkpointing changes.
TEST(MemoryPlan, CheckpointingAtGpt2VocabularyMatchesTheRun) {
  TempDir dir;
  std::vector<uint16_t> tokens(20000);
  uint32_t x = 7;
  for (uint16_t& t : tokens) {
    x = x * 1664525u + 1013904223u;
    t = static_cast<uint16_t>((x >> 8) % 50257u);
  }
  data::write_token_file(dir.path() / "t.bin", tokens);
  train::TrainConfig c = tiny("bf16", true);
  c.model.context = 64;
  c.data = (dir.path() / "t.bin").string();
  const study::MemoryPlan p = study::plan_memory(c, {.estimate_time = false});
  const int64_t real = measured_peak(c);
  EXPECT_NEAR(double(p.peak_bytes), double(real), 0.02 * double(real));
  c.model.checkpointing = false;
  const study::MemoryPlan full = study::plan_memory(c, {.estimate_time = false});
  // One block input per block (B x T x d in the residual stream's format) against every save.
  EXPECT_LT(p.analytic_activation_bytes, full.analytic_activation_bytes);
  const std::string cmd = "plan --model gpt2 --layers 4 --width 64 --heads 2 --context 64 "
                          "--batch 4 --threads 1 --precision bf16 --data " +
                          (dir.path() / "t.bin").string();
  const auto with = run_cli(cmd + " --checkpointing");
  const auto without = run_cli(cmd);
  ASSERT_EQ(with.exit_code, 0) << with.err;
  ASSERT_EQ(without.exit_code, 0) << without.err;
  EXPECT_NE(with.out.find("activations, temporaries at the peak (measured)"), std::string::npos)
      << with.out;
  EXPECT_NE(with.out.find("saved for backward (analytic): checkpoints + head"), std::string::npos)
      << with.out;
  EXPECT_NE(without.out.find("saved for backward (analytic): all blocks + head"),
            std::string::npos)
      << without.out;
}

}  // namespace
}  // namespace mixp::test
