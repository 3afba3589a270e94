// Your own model in FP8, after TransformerEngine: the linears of a user-defined Module compute in
// FP8 (E4M3 forward, E5M2 gradients, per-tensor delayed scaling) inside an Fp8Autocast region,
// everything else in bf16 under autocast, with fp32 master weights; the final classifier stays
// out of FP8 (kind "head"), as TE's recipes keep the output layer in higher precision. Compared
// with the same model trained in bf16: the loss curves should agree closely (docs/fp8.md).
//
// Run: build/release/example_custom_model_fp8 [steps]
// ctest-args: 30
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "mixp/mixp.h"

namespace mx = mixp;  // an alias instead of `using namespace mixp` (see custom_model_amp.cpp)
using mx::DType;
using mx::Tensor;

class Classifier : public mx::nn::Module {
 public:
  Classifier(int64_t in, int64_t hidden, int64_t classes, mx::Generator& gen) : Module("mlp") {
    fc1_ = register_module("fc1", std::make_shared<mx::nn::Linear>(in, hidden, gen));
    fc2_ = register_module("fc2", std::make_shared<mx::nn::Linear>(hidden, hidden, gen));
    head_ = register_module("head", std::make_shared<mx::nn::Linear>(hidden, classes, gen));
    head_->set_kind("head");  // amp::enable_fp8 converts kind "linear" only: the head stays bf16
    act_ = register_module("act", std::make_shared<mx::nn::GELU>());
  }
  Tensor forward(const Tensor& x) override {
    return (*head_)((*act_)((*fc2_)((*act_)((*fc1_)(x)))));
  }

 private:
  std::shared_ptr<mx::nn::Linear> fc1_, fc2_, head_;
  std::shared_ptr<mx::nn::GELU> act_;
};

// Trains a fresh model (same initialisation every time) and returns the per-step losses.
std::vector<double> fit(bool fp8, const Tensor& x, const Tensor& y, int steps) {
  mx::Generator gen(3);
  Classifier model(32, 128, 8, gen);
  if (fp8) {
    mx::amp::Fp8Recipe recipe;     // TE's DelayedScaling defaults, HYBRID format
    recipe.amax_history_len = 16;  // a short history for a short run
    const auto enabled = mx::amp::enable_fp8(model, recipe);
    std::printf("FP8 layers: %zu (", enabled.size());
    for (const auto& n : enabled) std::printf(" %s", n.c_str());
    std::printf(" )\n");
  }
  mx::optim::AdamW opt(model.named_parameters(), {.lr = 2e-3});
  std::vector<double> losses;
  const int64_t batch = 64, n = x.shape()[0];
  for (int step = 0; step < steps; ++step) {
    const int64_t lo = (step * batch) % n;
    opt.zero_grad();
    Tensor loss;
    {
      mx::amp::Autocast ac(DType::bf16);  // the non-FP8 ops in bf16
      mx::amp::Fp8Autocast fp8_region(fp8);
      loss = mx::cross_entropy(model(x.slice(0, lo, lo + batch)), y.slice(0, lo, lo + batch));
    }
    loss.backward();
    opt.step();
    if (fp8) mx::amp::fp8_update_backward_states();
    losses.push_back(loss.item());
  }
  return losses;
}

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 200;
  mx::Generator gen(1);
  const int64_t n = 2048, in = 32, classes = 8;
  const Tensor centres = mx::mul(mx::randn({classes, in}, gen), 1.5);
  const Tensor y = mx::randint(0, classes, {n}, gen);
  const Tensor x = mx::add(mx::embedding(y, centres), mx::randn({n, in}, gen)).detach();

  const std::vector<double> bf16 = fit(false, x, y, steps), fp8 = fit(true, x, y, steps);
  double worst = 0;
  for (int i = 0; i < steps; ++i) worst = std::max(worst, std::abs(fp8[i] - bf16[i]));
  std::printf("step  bf16     fp8\n");
  for (int i = 0; i < steps; i += std::max(1, steps / 6))
    std::printf("%4d  %.4f  %.4f\n", i, bf16[size_t(i)], fp8[size_t(i)]);
  std::printf("final: bf16 %.4f, fp8 %.4f; largest per-step difference %.4f\n", bf16.back(),
              fp8.back(), worst);
  if (!(fp8.back() < fp8.front()) || !(std::abs(fp8.back() - bf16.back()) < 0.1)) {
    std::fprintf(stderr, "FP8 training did not track bf16\n");
    return 1;
  }
  return 0;
}
