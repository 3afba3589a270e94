// `mixp plan --precision nvfp4|mxfp4|fp8-block` (issue 32; docs/plan.md "Block-scaled recipes"):
// the weight copies are the quantized codes plus block scales for the transformer blocks and a
// bf16 copy for the head (and the bf16_last blocks), against a hand computation.
#include <gtest/gtest.h>

#include "common/cli_runner.h"
#include "mixp/study/memory_plan.h"
#include "mixp/study/model_shape.h"

namespace mixp::test {
namespace {

// GPT-2 layout, 4 blocks of width 64, FFN 256, vocabulary 1000 (padded to 1024).
study::ModelShape small() {
  study::ModelShape s;
  s.name = "custom";
  s.family = study::ShapeFamily::gpt2;
  s.layers = 4;
  s.width = 64;
  s.heads = 2;
  s.ffn = 256;
  s.vocab = 1000;
  s.padded_vocab = 1024;
  s.context = 128;
  return s;
}

TEST(PlanBlockRecipes, WeightCopiesByHand) {
  // Per block: qkv + proj 4 * 64 * 64 + fc + proj 2 * 64 * 256 = 49152 weights; 4 blocks 196608.
  // The head reads the 1024 x 64 embedding: 65536 weights, kept in bf16 (131072 bytes).
  const study::PlanOptions no_time{.estimate_time = false};
  const auto cast = [&](const char* precision) {
    return study::plan_shape(small(), {.batch = 2, .seq = 128, .precision = precision}, no_time)
        .cast_copy_bytes;
  };
  EXPECT_EQ(cast("nvfp4"), 196608 * (4 + 8.0 / 256) / 8 + 131072);  // 16x16 E4M3 scales
  EXPECT_EQ(cast("nvfp4:2d=0"), 196608 * (4 + 8.0 / 16) / 8 + 131072);
  // bf16_last=1: three blocks in nvfp4, the last block and the head in bf16.
  EXPECT_EQ(cast("nvfp4:bf16_last=1"), 3 * 49152 * (4 + 8.0 / 256) / 8 + (49152 + 65536) * 2);
  EXPECT_EQ(cast("mxfp4"), 196608 * (4 + 8.0 / 32) / 8 + 131072);
  EXPECT_EQ(cast("fp8-block"), 196608 + 196608 * 32 / (128 * 128) / 8 + 131072);
  // Hand values: 230144, 241664, 303680, 235520, 327728 bytes.
  EXPECT_EQ(cast("nvfp4"), 230144);
  EXPECT_EQ(cast("fp8-block"), 327728);
  // The masters are the fp32 parameters; the rest is priced as for the other FP8 recipes.
  const study::MemoryPlan p =
      study::plan_shape(small(), {.batch = 2, .seq = 128, .precision = "nvfp4"}, no_time);
  EXPECT_EQ(p.param_bytes, 4 * study::parameters(small()));
  EXPECT_EQ(p.master_bytes, 0);
  EXPECT_EQ(p.peak_bytes, p.param_bytes + p.grad_bytes + p.master_bytes + p.state_bytes +
                              p.cast_copy_bytes + p.comm_bytes + p.activation_bytes);
  // Per-tensor FP8 is unchanged: one byte per weight, head included.
  EXPECT_EQ(cast("fp8"), 196608 + 65536);
}

TEST(PlanBlockRecipes, Cli) {
  const CliResult r = run_cli(
      "plan --model-shape custom --family gpt2 --layers 4 --width 64 --heads 2 --mlp-width 256 "
      "--vocab 1000 --context 128 --batch 2 --precision nvfp4 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.json()["cast_copy_bytes"], 230144);
}

}  // namespace
}  // namespace mixp::test
