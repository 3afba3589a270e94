// Your own model and data through the Trainer: a Module subclass, synthetic data in your own
// tensors (a TensorDataset: seeded shuffling, batching), a precision recipe chosen by name, and
// callbacks, one logging the loss after each step and one looking at the gradients between
// backward and the optimizer step. The Trainer does the rest: autocast, loss scaling with a
// GradScaler under fp16 (skipping steps whose gradients overflow), gradient accumulation,
// clipping, evaluation, checkpoints (TrainOptions::save_dir). docs/train.md, "Training your own
// model through the Trainer", walks through it.
//
// Run: build/release/example_custom_model_trainer [recipe] [steps]
//      recipe: bf16 (default), fp16, fp32, bf16-pure, fp8, ... (mixp train --help lists them)
// ctest-args: fp16 40
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "mixp/mixp.h"

// An alias rather than `using namespace mixp`, under which a function of yours named `train` would
// be ambiguous with the namespace mixp::train.
namespace mx = mixp;
using mx::Tensor;

// A model: children registered in the constructor, called through operator() in forward (so that
// the recipes' per-layer wrappers apply). The kind string ("mlp") is what --layer-precision style
// rules select by.
class TinyNet : public mx::nn::Module {
 public:
  TinyNet(int64_t in, int64_t hidden, int64_t classes, mx::Generator& gen) : Module("mlp") {
    fc1_ = register_module("fc1", std::make_shared<mx::nn::Linear>(in, hidden, gen));
    norm_ = register_module("norm", std::make_shared<mx::nn::LayerNorm>(hidden));
    act_ = register_module("act", std::make_shared<mx::nn::GELU>());
    fc2_ = register_module("fc2", std::make_shared<mx::nn::Linear>(hidden, classes, gen));
  }
  Tensor forward(const Tensor& x) override { return (*fc2_)((*act_)((*norm_)((*fc1_)(x)))); }

 private:
  std::shared_ptr<mx::nn::Linear> fc1_, fc2_;
  std::shared_ptr<mx::nn::LayerNorm> norm_;
  std::shared_ptr<mx::nn::GELU> act_;
};

int run(int argc, char** argv) {
  const std::string recipe = argc > 1 ? argv[1] : "bf16";
  const int64_t steps = argc > 2 ? std::atoll(argv[2]) : 200;

  // Synthetic classification data in plain tensors: class c is a Gaussian blob around centre c.
  mx::Generator gen(1);
  const Tensor centres = mx::mul(mx::randn({4, 16}, gen), 0.5);
  const Tensor y = mx::randint(0, 4, {1024}, gen);  // int64 labels
  const Tensor x = mx::add(mx::embedding(y, centres), mx::randn({1024, 16}, gen)).detach();

  // ---- training through the Trainer
  auto data = std::make_unique<mx::train::TensorDataset>(
      x.slice(0, 0, 768), y.slice(0, 0, 768), mx::train::TensorDatasetOptions{.batch_size = 32});
  data->set_eval(x.slice(0, 768, 1024), y.slice(0, 768, 1024));  // held-out samples
  mx::Generator init(7);
  auto model = std::make_shared<TinyNet>(16, 64, 4, init);  // fp32; the recipe converts it

  mx::train::TrainOptions opt;
  opt.steps = steps;
  opt.grad_accum = 2;  // 2 micro-batches of 32 per optimizer step
  opt.lr = 3e-3;
  opt.clip = 1.0;  // clips the unscaled gradients (after the GradScaler's unscale under fp16)
  mx::train::Trainer trainer(model, mx::train::make_recipe(recipe), std::move(data), opt);

  std::vector<double> losses;
  trainer.add_callback(
      std::make_shared<mx::train::StepFunctionCallback>([&](const mx::train::StepInfo& s) {
        losses.push_back(s.loss);
        if (s.step % 10 == 0 || s.step == s.total_steps)
          std::printf("step %3lld  loss %.4f  loss scale %-6g%s\n", (long long)s.step, s.loss,
                      s.loss_scale, s.skipped ? "  (skipped: inf/NaN gradients)" : "");
      }));
  int64_t missing = 0;  // gradients no backward reached (none expected here)
  trainer.add_callback(
      std::make_shared<mx::train::GradientFunctionCallback>([&](mx::train::StepContext& ctx) {
        for (const Tensor& p : ctx.parameters) missing += p.grad().defined() ? 0 : 1;
      }));
  const mx::train::TrainResult r = trainer.fit();
  // ---- end of training

  std::printf("%s: %s\n", r.precision.c_str(), r.recipe.c_str());
  std::printf("final loss %.4f, held-out accuracy %.3f, %lld skipped steps, loss scale %g\n",
              r.final_loss, r.test_accuracy.value_or(0.0), (long long)r.skipped_steps,
              r.loss_scale);
  const size_t k = std::min<size_t>(5, losses.size() / 2);
  double first = 0, last = 0;
  for (size_t i = 0; i < k; ++i) {
    first += losses[i];
    last += losses[losses.size() - 1 - i];
  }
  if (k == 0 || !(last < first) || missing != 0) {
    std::fprintf(stderr,
                 "the loss did not fall (%g -> %g over %zu steps) or gradients were "
                 "missing (%lld)\n",
                 first / double(k), last / double(k), losses.size(), (long long)missing);
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // e.g. int8-qat, which quantizes Sequential models only
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
