// bf16 without a GradScaler, and pure bf16 training with stochastic rounding.
//
// Part 1 is the seeds' "BF16 training" snippet (003): bf16 has fp32's 8 exponent bits, so the
// gradients do not underflow and no loss scaling is needed:
//   with autocast(dtype=torch.bfloat16): loss = ...      { amp::Autocast ac(DType::bf16); ... }
//   loss.backward(); optimizer.step()                      loss.backward(); opt.step();
//
// Part 2 goes further (llm.c's pure-bf16 training, the bf16-pure recipe): parameters and Adam's
// states are stored in bf16 and there is no fp32 master copy. An update smaller than half a bf16
// ulp of its weight (2^-9 relative) would be lost by round-to-nearest; stochastic rounding rounds
// up with probability (x - down) / ulp, so on average every update lands.
//
// Run: build/release/example_bf16_pure_stochastic
// ctest-args:
#include <cstdio>

#include "mixp/amp/autocast.h"
#include "mixp/nn/models.h"
#include "mixp/ops/ops.h"
#include "mixp/optim/adam.h"
#include "mixp/tensor/factories.h"
#include "mixp/train/recipe.h"

using namespace mixp;

// Linear regression y = x w_true in pure bf16, starting from w = 1 with w_true in [1.1, 1.3]:
// Adam's steps of ~1e-3 are below half an ulp of 1 in bf16 (2^-8).
double regression(const std::string& recipe) {
  const auto r = train::make_recipe(recipe);  // only its optimizer settings are used here
  Generator gen(4);
  const Tensor x = randn({512, 64}, gen).to(DType::bf16, Round::nearest_even);
  const Tensor y = matmul(x.to(DType::fp32), uniform({64, 1}, 1.1, 1.3, gen));
  Tensor w = ones({64, 1}, {.dtype = DType::bf16}).requires_grad_();
  optim::Adam opt(optim::NamedTensors{{"w", w}},
                  {.lr = 1e-3, .precision = r->optimizer_precision()});
  double loss_value = 0;
  for (int step = 0; step < 400; ++step) {
    opt.zero_grad();
    Tensor loss = mse_loss(matmul(x, w).to(DType::fp32), y);
    loss_value = loss.item();
    loss.backward();  // w.grad() is fp32 (mixp accumulates the gradients of 16-bit leaves in fp32)
    opt.step();       // fp32 update of a widened copy, written back to bf16
  }
  return loss_value;
}

// The regression's loss at w = 1, before any step.
double initial_loss() {
  Generator gen(4);
  const Tensor x = randn({512, 64}, gen).to(DType::bf16, Round::nearest_even);
  const Tensor y = matmul(x.to(DType::fp32), uniform({64, 1}, 1.1, 1.3, gen));
  return mse_loss(matmul(x, ones({64, 1}, {.dtype = DType::bf16})).to(DType::fp32), y).item();
}

int main() {
  // Part 1: bf16 autocast, fp32 weights, no scaler.
  Generator gen(0);
  auto model = nn::make_model({.name = "mlp", .width = 128});
  optim::AdamW opt(model->named_parameters(), {.lr = 1e-3});
  const Tensor x = randn({64, 784}, gen);
  const Tensor y = randint(0, 10, {64}, gen, {.dtype = DType::int64});
  for (int step = 0; step < 20; ++step) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::Autocast ac(DType::bf16);
      loss = cross_entropy((*model)(x), y);
    }
    loss.backward();
    opt.step();
    if (step % 5 == 0) std::printf("bf16 autocast  step %2d  loss %.4f\n", step, loss.item());
  }

  // Part 2: pure bf16, nearest versus stochastic write-back (and Kahan compensation).
  std::printf("pure bf16 regression (mean squared error at the start: %.4f), final loss:\n",
              initial_loss());
  std::printf("  round to nearest      %.4f   (updates below half an ulp vanish)\n",
              regression("bf16-pure:rounding=nearest,states=fp32"));
  std::printf("  stochastic rounding   %.4f   (bf16-pure)\n", regression("bf16-pure"));
  std::printf("  nearest + Kahan       %.4f   (bf16-pure:rounding=nearest,kahan=on)\n",
              regression("bf16-pure:rounding=nearest,kahan=on"));
  return 0;
}
