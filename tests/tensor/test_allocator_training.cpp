// The caching allocator's promise to the training loop: once the first steps have filled the
// cache, a step makes no system allocation (splitting and coalescing must not fragment the large
// pool into a state where a later step no longer fits). mlp tensors are all small blocks; the gpt
// below has large ones (its 4x MLP and attention scores are 4 MiB in fp32), in several recipes.
#include <gtest/gtest.h>

#include <string>

#include "mixp/tensor/allocator.h"
#include "mixp/train/trainer.h"

namespace mixp {
namespace {

struct LoopCase {
  std::string model, precision;
  bool checkpointing = false;
};

train::TrainConfig config(const LoopCase& lc) {
  train::TrainConfig c;
  c.model.name = lc.model;
  c.data = train::kSyntheticData;
  c.seed = 5;
  c.threads = 1;
  c.steps = 100;
  c.precision = lc.precision;
  c.model.checkpointing = lc.checkpointing;
  c.evaluate = false;
  if (lc.model == "gpt") {
    c.model.width = 128, c.model.layers = 2, c.model.heads = 4, c.model.context = 128;
    c.batch = 16;
  } else {
    c.model.width = 256;
    c.train_limit = 2048;
    c.batch = 64;
  }
  return c;
}

class TrainingLoop : public ::testing::TestWithParam<LoopCase> {};

TEST_P(TrainingLoop, MakesNoSystemAllocationsAfterWarmup) {
  if (!CachingAllocator::cpu().caching()) GTEST_SKIP() << "MIXP_ALLOCATOR=system";
  train::Trainer t(config(GetParam()));
  t.train_steps(2);  // the first steps fill the allocator's cache and oneDNN's
  const AllocatorStats s0 = allocator_stats();
  t.train_steps(6);
  const AllocatorStats s1 = allocator_stats();
  EXPECT_EQ(s1.system_allocs, s0.system_allocs);
  EXPECT_EQ(s1.reserved_bytes, s0.reserved_bytes);
  EXPECT_GT(s1.cache_hits, s0.cache_hits);
}

INSTANTIATE_TEST_SUITE_P(Allocator, TrainingLoop,
                         ::testing::Values(LoopCase{"mlp", "fp32"}, LoopCase{"mlp", "bf16"},
                                           LoopCase{"gpt", "fp32"}, LoopCase{"gpt", "bf16"},
                                           LoopCase{"gpt", "fp16-o2"},
                                           LoopCase{"gpt", "bf16", true}),
                         [](const auto& info) {
                           std::string n = info.param.model + "_" + info.param.precision +
                                           (info.param.checkpointing ? "_checkpointing" : "");
                           for (char& ch : n) ch = ch == '-' ? '_' : ch;
                           return n;
                         });

}  // namespace
}  // namespace mixp
