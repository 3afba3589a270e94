// `mixp plan` with LoRA and QLoRA (study/memory_plan.h, docs/plan.md "LoRA and QLoRA"): the plan
// counts gradients, masters and optimizer states for the adapters only and the frozen base in its
// stored format, and its peak is within 5% of the peak a real run of the same configuration
// measures (llama, 4 layers, the 1- and 2-layer probes extrapolated).
#include <gtest/gtest.h>

#include <cmath>

#include "mixp/study/memory_plan.h"
#include "mixp/train/trainer.h"
#include "train/train_test_util.h"

namespace mixp {
namespace {

train::TrainConfig llama_lora(const std::string& precision) {
  train::TrainConfig c = train::testing::small_gpt(precision);
  c.model.name = "llama";
  c.model.width = 128;
  c.model.layers = 4;
  c.model.heads = 4;
  c.model.kv_heads = 2;
  c.model.mlp_width = 344;
  c.model.context = 64;
  c.batch = 4;
  c.lora = "r=8,alpha=16,targets=q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj";
  c.evaluate = false;
  return c;
}

void expect_plan_within_5_percent(const std::string& precision) {
  SCOPED_TRACE(precision);
  train::TrainConfig c = llama_lora(precision);
  study::PlanOptions opt;
  opt.estimate_time = false;
  const study::MemoryPlan p = study::plan_memory(c, opt);
  c.steps = 2;
  train::Trainer t(c);
  const train::TrainResult r = t.fit();
  int64_t adapters = 0;
  for (const auto& [name, w] : t.model().named_parameters())
    if (w.requires_grad()) adapters += w.numel();
  EXPECT_TRUE(p.lora);
  EXPECT_EQ(p.trainable, adapters);
  EXPECT_EQ(p.parameters, r.parameters);
  EXPECT_EQ(p.grad_bytes, 4 * adapters);   // fp32 gradients of the adapters only
  EXPECT_EQ(p.state_bytes, 8 * adapters);  // AdamW's m and v in fp32
  EXPECT_EQ(p.master_bytes, 0);            // the adapters are fp32 parameters
  const double ratio = double(p.peak_bytes) / double(r.peak_memory_bytes);
  EXPECT_NEAR(ratio, 1.0, 0.05) << "planned " << p.peak_bytes << " measured "
                                << r.peak_memory_bytes;
}

TEST(QloraPlan, QloraNf4PeakWithin5PercentOfTheRun) { expect_plan_within_5_percent("qlora-nf4"); }
TEST(QloraPlan, LoraBf16PeakWithin5PercentOfTheRun) { expect_plan_within_5_percent("bf16"); }

TEST(QloraPlan, TheFourBitBaseIsAFractionOfTheFp32Base) {
  study::PlanOptions opt;
  opt.estimate_time = false;
  const study::MemoryPlan q = study::plan_memory(llama_lora("qlora-nf4"), opt);
  const study::MemoryPlan b = study::plan_memory(llama_lora("bf16"), opt);
  // The same adapters; the base's Linear weights in 4.127 bits instead of 32.
  EXPECT_EQ(q.trainable, b.trainable);
  EXPECT_LT(q.param_bytes, b.param_bytes / 3);
}

}  // namespace
}  // namespace mixp
