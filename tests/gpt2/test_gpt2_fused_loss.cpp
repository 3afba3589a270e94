// GPT-2's loss in forward (nn/gpt.h, set_loss_targets): the fused classifier on the padded head
// output gives the loss and every parameter gradient of cross_entropy on forward()'s logits, bit
// for bit, in fp32 and under bf16 autocast, with one [tokens, padded vocabulary] buffer fewer at
// the step's peak.
#include <gtest/gtest.h>

#include "mixp/amp/autocast.h"
#include "mixp/mixp.h"

namespace mixp::test {
namespace {

nn::GptConfig small_gpt2() {
  // A padded vocabulary (100 of 128 rows, as 50257 of 50304) and a tied head, as the gpt2 preset.
  return {.vocab = 100, .context = 16, .width = 32, .layers = 2, .heads = 2, .mlp_width = 64,
          .tied_head = true, .padded_vocab = 128};
}

struct StepResult {
  std::vector<double> loss;
  std::vector<std::vector<double>> grads;
  int64_t backward_peak = 0;  // allocator peak during backward, above what was live before it
};

StepResult step(bool fused, bool autocast, int64_t batch = 3) {
  Generator gen(5);
  nn::Gpt model(small_gpt2(), gen);
  Generator data(6);
  const Tensor idx = randint(0, 100, {batch, 16}, data);
  const Tensor tgt = randint(0, 100, {batch, 16}, data);
  Tensor loss;
  {
    std::optional<amp::Autocast> ac;
    if (autocast) ac.emplace(DType::bf16);
    if (fused) {
      model.set_loss_targets(tgt);
      loss = model(idx);
      model.set_loss_targets(Tensor());
    } else {
      const Tensor logits = model(idx);
      loss = cross_entropy(logits.reshape({-1, 100}).contiguous(), tgt.reshape({-1}));
    }
  }
  StepResult r;
  r.loss = loss.to_double_vector();
  const int64_t live = allocator_stats().allocated_bytes;
  reset_peak_memory();
  mul(loss, 1.0 / 3.0).backward();  // an upstream gradient that is not a power of two
  r.backward_peak = allocator_stats().peak_allocated_bytes - live;
  for (const auto& [name, p] : model.named_parameters())
    r.grads.push_back(p.grad().to_double_vector());
  return r;
}

TEST(Gpt2FusedLoss, SameLossAndGradientsAsCrossEntropyOnTheLogits) {
  for (bool autocast : {false, true}) {
    SCOPED_TRACE(autocast ? "bf16 autocast" : "fp32");
    const StepResult a = step(true, autocast), b = step(false, autocast);
    EXPECT_EQ(a.loss, b.loss);
    ASSERT_EQ(a.grads.size(), b.grads.size());
    for (size_t i = 0; i < a.grads.size(); ++i)
      EXPECT_EQ(a.grads[i], b.grads[i]) << "parameter " << i;
  }
}

TEST(Gpt2FusedLoss, BackwardHoldsOneLogitsBufferLess) {
  // 64 sequences x 16 tokens x 128 columns fp32: 512 KiB per logits-sized tensor, above the
  // rest of this model's backward transients.
  const StepResult a = step(true, false, 64), b = step(false, false, 64);
  const int64_t logits_bytes = 64 * 16 * 128 * 4;
  EXPECT_LE(a.backward_peak + logits_bytes / 2, b.backward_peak)
      << a.backward_peak << " vs " << b.backward_peak;
}

TEST(Gpt2FusedLoss, TargetsMustMatchTheInput) {
  Generator gen(5);
  nn::Gpt model(small_gpt2(), gen);
  model.set_loss_targets(zeros({2, 5}, {.dtype = DType::int64}));
  EXPECT_THROW(model(zeros({2, 16}, {.dtype = DType::int64})), std::invalid_argument);
}

}  // namespace
}  // namespace mixp::test
