// The memory check before training (issue 28 item 8; include/mixp/study/memory_check.h): a run
// whose planned peak exceeds the available memory is refused before anything is allocated, exit 1
// with what it needs; the planner's pricing of mlp/cnn; the message.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/cli_runner.h"
#include "mixp/nn/models.h"
#include "mixp/study/memory_check.h"

namespace mixp::test {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// --batch 2000000000 is in range but needs terabytes: refused before the Trainer allocates its
// batch buffers (it used to end in std::bad_alloc; a larger one in a segfault).
TEST(CliMemoryCheck, RefusesARunThatCannotFit) {
  const CliResult r = run_cli("train --model mlp --data synthetic --batch 2000000000 --steps 1");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, StartsWith("mixp train: error: not enough memory: training mlp (batch "
                                "2000000000, fp32) needs "));
  EXPECT_THAT(r.err, HasSubstr(" TiB ("));
  EXPECT_THAT(r.err, HasSubstr("available; a smaller --batch needs less\n"));
  const CliResult gpt =
      run_cli("train --model gpt --data synthetic --batch 2000000 --context 1024 --steps 1");
  EXPECT_EQ(gpt.exit_code, 1) << gpt.err;
  EXPECT_THAT(gpt.err, HasSubstr("training gpt (batch 2000000 x 1024 tokens, fp32) needs "));
  EXPECT_THAT(gpt.err, HasSubstr("a smaller --batch, --context or --checkpointing needs less"));
}

// mlp/cnn: the persistent tensors from the parameter count (fp32 AdamW: weight, gradient and two
// states, 16 bytes each), the activations linear in the batch.
TEST(CliMemoryCheck, PlansMlpFromItsParametersAndGemms) {
  train::TrainConfig c;
  c.model.name = "mlp";
  c.precision = "fp32";
  c.optimizer = "adamw";
  c.batch = 100;
  c = c.resolved();
  const int64_t params = nn::make_model(c.model)->num_parameters();
  const study::MemoryNeed a = study::plan_training_memory(c);
  c.batch = 300;
  const study::MemoryNeed b = study::plan_training_memory(c);
  EXPECT_EQ(a.persistent_bytes, 16 * params);
  EXPECT_EQ(b.persistent_bytes, a.persistent_bytes);
  EXPECT_GT(a.activation_bytes, 100 * 784 * 4);  // at least the input batch
  EXPECT_EQ(b.activation_bytes, 3 * a.activation_bytes);
  EXPECT_EQ(a.peak_bytes, a.persistent_bytes + a.activation_bytes);
  // The message, and no message when it fits or the available memory is unknown.
  const study::MemoryNeed big{.peak_bytes = 3ll << 30, .persistent_bytes = 1ll << 30,
                              .activation_bytes = 2ll << 30};
  const auto m = study::memory_shortfall(c, big, 1ull << 30);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(*m,
            "not enough memory: training mlp (batch 300, fp32) needs 3.0 GiB (2.0 GiB of "
            "activations, 1.0 GiB of parameters, gradients and optimizer states; `mixp plan` "
            "shows the breakdown), 1.0 GiB available; a smaller --batch needs less");
  EXPECT_FALSE(study::memory_shortfall(c, big, 4ull << 30).has_value());
  EXPECT_FALSE(study::memory_shortfall(c, big, 0).has_value());
  EXPECT_GT(study::available_memory_bytes(), 0u);
}

}  // namespace
}  // namespace mixp::test
