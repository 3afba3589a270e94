// The operation counts behind the energy estimate, checked against counts done by hand.
#include <gtest/gtest.h>

#include "mixp/nn/activation.h"
#include "mixp/nn/conv2d.h"
#include "mixp/nn/flatten.h"
#include "mixp/nn/linear.h"
#include "mixp/nn/sequential.h"
#include "mixp/study/step_counts.h"
#include "mixp/train/recipe.h"
#include "mixp/train/train_config.h"

namespace mixp::study {
namespace {

// flatten, fc1 4 -> 3 (ReLU fused), head 3 -> 2: 4*3+3 + 3*2+2 = 23 trained values.
std::shared_ptr<nn::Sequential> tiny_mlp() {
  Generator gen(1);
  auto m = std::make_shared<nn::Sequential>();
  m->add("flatten", std::make_shared<nn::Flatten>());
  m->add("fc1", std::make_shared<nn::Linear>(4, 3, gen,
                                             nn::LinearOptions{.activation = Activation::relu}));
  m->add("head", std::make_shared<nn::Linear>(3, 2, gen));
  return m;
}

TEST(StepCounts, TinyMlpTraceHasEachLinearWithTheBatchInM) {
  auto m = tiny_mlp();
  const StepTrace t = trace_step_gemms(*m, Shape{2, 2}, 2);  // samples of 2x2 = 4 values
  ASSERT_EQ(t.gemms.size(), 2u);
  EXPECT_EQ(t.gemms[0].layer, "fc1");
  EXPECT_EQ(t.gemms[0].m, 2);
  EXPECT_EQ(t.gemms[0].n, 3);
  EXPECT_EQ(t.gemms[0].k, 4);
  EXPECT_FALSE(t.gemms[0].a_grad) << "the first layer's input is data: no dX";
  EXPECT_TRUE(t.gemms[0].b_grad);
  EXPECT_EQ(t.gemms[1].layer, "head");
  EXPECT_EQ(t.gemms[1].m, 2);
  EXPECT_EQ(t.gemms[1].n, 2);
  EXPECT_EQ(t.gemms[1].k, 3);
  EXPECT_TRUE(t.gemms[1].a_grad);
  EXPECT_EQ(t.parameters, 23);
  EXPECT_EQ(t.weight_values, 12 + 6);
  EXPECT_TRUE(t.not_counted.empty());
  EXPECT_TRUE(m->is_training()) << "the trace leaves the model in its mode";
}

TEST(StepCounts, TinyMlpFp32StepByHand) {
  auto m = tiny_mlp();
  const StepTrace t = trace_step_gemms(*m, Shape{4}, 2);
  const OpCounts c = count_training_step(t, step_precision("fp32"));
  // MACs: fc1 forward 2*3*4 = 24 and dW 24 (no dX); head forward 2*2*3 = 12, dX 12, dW 12.
  EXPECT_EQ(c[MacKind::fp32], 24 + 24 + 12 + 12 + 12);
  EXPECT_EQ(c.total_macs(), 84);
  // GEMM bytes (A + B + C, 4 bytes each):
  //   fc1 fwd  (2x4)(4x3)->(2x3): 8+12+6 = 26 values;  dW (4x2)(2x3)->(4x3): 8+6+12 = 26
  //   head fwd (2x3)(3x2)->(2x2): 6+6+4  = 16;         dX (2x2)(2x3)->(2x3): 4+6+6 = 16
  //   head dW  (3x2)(2x2)->(3x2): 6+4+6  = 16           total 100 values = 400 bytes
  // AdamW: 23 values x (read+write param 8, read grad 4, read+write 2 states 16) = 23 x 28 = 644.
  EXPECT_EQ(c.dram_bytes, 400 + 644);
  // Every dimension is below the 64-wide tile: each operand passes through SRAM once.
  EXPECT_EQ(c.sram_bytes, 400);
  // Priced with the Horowitz table: 4.6 pJ per fp32 MAC, 243.75 pJ per DRAM byte, 1.25 per SRAM.
  EXPECT_NEAR(estimate_joules(c), (84 * 4.6 + 1044 * 243.75 + 400 * 1.25) * 1e-12, 1e-18);
}

TEST(StepCounts, TinyMlpBf16MixedStepByHand) {
  auto m = tiny_mlp();
  const StepTrace t = trace_step_gemms(*m, Shape{4}, 2);
  const StepPrecision p = step_precision("bf16");
  EXPECT_EQ(p.compute, DType::bf16);
  EXPECT_EQ(p.param, DType::fp32);
  EXPECT_TRUE(p.casts_weights);
  const OpCounts c = count_training_step(t, p);
  EXPECT_EQ(c[MacKind::bf16], 84);
  EXPECT_EQ(c[MacKind::fp32], 0);
  // GEMMs at 2 bytes: 200; AdamW on fp32 master weights: 644; the per-step cast of the 18 weight
  // values: read fp32 (4) + write bf16 (2) = 108.
  EXPECT_EQ(c.dram_bytes, 200 + 644 + 108);
}

// The 8-bit rows of a study, by hand on the same model: fp8 prices every product (forward and
// both gradients) as an fp8 multiply-add on 1-byte operands; int8-qat's fake-quantized training
// is fp32's step exactly.
TEST(StepCounts, TinyMlpFp8AndInt8QatStepsByHand) {
  auto m = tiny_mlp();
  const StepTrace t = trace_step_gemms(*m, Shape{4}, 2);
  const OpCounts fp8 = count_training_step(t, step_precision("fp8"));
  EXPECT_EQ(fp8[MacKind::fp8], 84);
  EXPECT_EQ(fp8.total_macs(), 84);
  // GEMMs: 100 values at 1 byte; AdamW on fp32 master weights 644; the cast of the 18 weight
  // values: read fp32 (4) + write fp8 (1) = 90.
  EXPECT_EQ(fp8.dram_bytes, 100 + 644 + 90);
  EXPECT_EQ(fp8.sram_bytes, 100);
  // 1.4 pJ per fp8 MAC (0.5 multiply at p = 4, 0.9 fp32 accumulate).
  EXPECT_NEAR(estimate_joules(fp8), (84 * 1.4 + 834 * 243.75 + 100 * 1.25) * 1e-12, 1e-18);
  for (const char* r : {"fp8-current", "mxfp8"}) {
    EXPECT_EQ(count_training_step(t, step_precision(r)).dram_bytes, fp8.dram_bytes) << r;
  }

  const OpCounts qat = count_training_step(t, step_precision("int8-qat"));
  const OpCounts fp32 = count_training_step(t, step_precision("fp32"));
  EXPECT_EQ(qat[MacKind::fp32], 84);
  EXPECT_EQ(qat.dram_bytes, fp32.dram_bytes);
  EXPECT_EQ(estimate_joules(qat), estimate_joules(fp32));
}

TEST(StepCounts, AccumulationRepeatsTheGemmsNotTheOptimizer) {
  auto m = tiny_mlp();
  const StepTrace t = trace_step_gemms(*m, Shape{4}, 2);
  const OpCounts c = count_training_step(t, step_precision("bf16"), 3);
  EXPECT_EQ(c[MacKind::bf16], 3 * 84);
  EXPECT_EQ(c.dram_bytes, 3 * (200 + 108) + 644);
  EXPECT_THROW(count_training_step(t, step_precision("bf16"), 0), std::invalid_argument);
}

TEST(StepCounts, Fp64AndSgd) {
  auto m = tiny_mlp();
  const StepTrace t = trace_step_gemms(*m, Shape{4}, 2);
  const StepPrecision p = step_precision("fp64", "sgd");
  EXPECT_EQ(p.states, 1);
  const OpCounts c = count_training_step(t, p);
  EXPECT_EQ(c[MacKind::fp64], 84);
  // GEMMs 100 values x 8; SGD: 23 x (param 16 + grad 8 + momentum read+write 16) = 23 x 40.
  EXPECT_EQ(c.dram_bytes, 800 + 23 * 40);
}

TEST(StepCounts, ConvolutionUsesItsOutputShape) {
  Generator gen(2);
  auto m = std::make_shared<nn::Sequential>();
  m->add("conv", std::make_shared<nn::Conv2d>(1, 2, 3, gen, nn::Conv2dOptions{.padding = 1}));
  m->add("flatten", std::make_shared<nn::Flatten>());
  m->add("head", std::make_shared<nn::Linear>(2 * 4 * 4, 3, gen));
  const StepTrace t = trace_step_gemms(*m, Shape{1, 4, 4}, 5);
  ASSERT_EQ(t.gemms.size(), 2u);
  // im2col: M = batch * out_h * out_w = 5 * 16, N = out channels, K = 1 * 3 * 3.
  EXPECT_EQ(t.gemms[0].m, 80);
  EXPECT_EQ(t.gemms[0].n, 2);
  EXPECT_EQ(t.gemms[0].k, 9);
  EXPECT_FALSE(t.gemms[0].a_grad);
  EXPECT_EQ(t.gemms[1].m, 5);
  EXPECT_EQ(t.gemms[1].k, 32);
  const OpCounts c = count_training_step(t, step_precision("fp32"));
  // conv: forward 80*2*9 = 1440, dW 1440; head: 5*3*32 = 480, three times.
  EXPECT_EQ(c.total_macs(), 1440 * 2 + 480 * 3);
}

TEST(StepCounts, GptFromItsConfiguration) {
  nn::ModelConfig mc;
  mc.name = "gpt";
  mc.width = 8;
  mc.heads = 2;
  mc.layers = 1;
  mc.context = 4;
  mc.vocab = 5;
  mc.mlp_width = 16;
  const StepTrace t = trace_step_gemms(mc, 1);
  // Per block: qkv 4*24*8 = 768; scores 4*4*4 per head x 2 heads = 128; values 128;
  // proj 4*8*8 = 256; mlp.fc 4*16*8 = 512; mlp.proj 4*8*16 = 512. Head 4*5*8 = 160.
  const OpCounts c = count_training_step(t, step_precision("fp32"));
  EXPECT_EQ(c.total_macs(), 3 * (768 + 128 + 128 + 256 + 512 + 512 + 160));
  mc.checkpointing = true;
  const OpCounts ck = count_training_step(trace_step_gemms(mc, 1), step_precision("fp32"));
  EXPECT_EQ(ck.total_macs() - c.total_macs(), 768 + 128 + 128 + 256 + 512 + 512)
      << "checkpointing recomputes each block's forward once";
}

TEST(StepCounts, BuiltInMlpMatchesItsShape) {
  nn::ModelConfig mc;
  mc.name = "mlp";
  const StepTrace t = trace_step_gemms(mc, 128);
  ASSERT_EQ(t.gemms.size(), 3u);
  const OpCounts c = count_training_step(t, step_precision("fp32"));
  const double fwd = 128.0 * (784 * 512 + 512 * 512 + 512 * 10);
  EXPECT_EQ(c.total_macs(), 3 * fwd - 128.0 * 784 * 512);
  EXPECT_EQ(t.parameters, 669706);
}

TEST(StepCounts, RecipeFormats) {
  EXPECT_EQ(step_precision("tf32").compute, DType::tf32);
  EXPECT_FALSE(step_precision("tf32").casts_weights);
  EXPECT_EQ(step_precision("fp16").compute, DType::fp16);
  EXPECT_TRUE(step_precision("fp16").casts_weights);
  EXPECT_EQ(step_precision("fp8").compute, DType::fp8_e4m3);
  EXPECT_EQ(step_precision("int8-qat").compute, DType::fp32);
  const StepPrecision pure = step_precision("bf16-pure");
  EXPECT_EQ(pure.param, DType::bf16);
  EXPECT_EQ(pure.grad, DType::bf16);
  EXPECT_EQ(pure.state, DType::bf16) << "bf16-pure keeps Adam's states in bf16";
  EXPECT_FALSE(pure.casts_weights);
  const StepPrecision fp16_pure = step_precision("fp16-pure");
  EXPECT_EQ(fp16_pure.param, DType::fp16);
  EXPECT_EQ(fp16_pure.state, DType::fp32);
  // O2 stores fp16 weights, but the optimizer works on the fp32 master copy.
  const StepPrecision o2 = step_precision("fp16-o2");
  EXPECT_EQ(o2.param, DType::fp32);
  EXPECT_EQ(o2.compute, DType::fp16);
  EXPECT_TRUE(o2.casts_weights);
  const StepPrecision fp64 = step_precision("fp64");
  EXPECT_EQ(fp64.state, DType::fp64);
  EXPECT_THROW(step_precision("something-new"), train::ConfigError);
  EXPECT_THROW(trace_step_gemms(*tiny_mlp(), Shape{4}, 0), std::invalid_argument);
}

// The formats come from the recipe as built, not from its name: a refined policy is priced in the
// formats it trains in (before the registry, "bf16:compute=fp16" was priced as fp32).
TEST(StepCounts, RefinedPolicyIsPricedInItsOwnFormats) {
  const StepTrace t = trace_step_gemms(*tiny_mlp(), Shape{4}, 2);
  const OpCounts refined = count_training_step(t, step_precision("bf16:compute=fp16"));
  const OpCounts fp16 = count_training_step(t, step_precision("fp16"));
  EXPECT_EQ(refined[MacKind::fp16], 84);
  EXPECT_EQ(refined[MacKind::fp32], 0);
  EXPECT_EQ(refined.dram_bytes, fp16.dram_bytes);
  EXPECT_EQ(estimate_joules(refined), estimate_joules(fp16));
  // Through the built recipe, as the study does.
  EXPECT_EQ(step_precision(train::make_recipe("bf16:compute=fp16")->dtypes()).compute, DType::fp16);
  EXPECT_TRUE(step_precision("bf16:compute=fp16").casts_weights);
  EXPECT_EQ(step_precision("bf16:states=bf16").state, DType::bf16);
  EXPECT_EQ(step_precision("fp8:margin=1").compute, DType::fp8_e4m3);
}

}  // namespace
}  // namespace mixp::study
