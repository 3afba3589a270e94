// Your own model and data, trained by hand in mixed precision: the program a libtorch user writes.
// A Module subclass (Linear -> LayerNorm -> GELU -> Linear), synthetic data in your own tensors,
// bf16 autocast and fp16 autocast with a GradScaler, four micro-batches of gradient accumulation
// inside ONE autocast region (as PyTorch's loop allows), clipping after unscale_, then saving the
// weights, loading them into a fresh model and running inference in bf16. docs/custom-models.md
// walks through it line by line next to the PyTorch loop.
//
// Run: build/release/example_custom_model_amp [steps]
// ctest-args: 20
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "mixp/mixp.h"

namespace mx = mixp;  // a short alias instead of `using namespace mixp` (docs/custom-models.md)
using mx::DType;
using mx::Tensor;

// 1. A model: register children (and parameters, if any of your own) in the constructor, call the
//    children through operator() in forward. The kind string is what --layer-precision rules and
//    the per-layer precision of the recipes select by ("mlp" here).
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

// Synthetic classification data: class c is a Gaussian blob around its own centre.
struct Data {
  Tensor x, y;  // [n, in] fp32, [n] int64
};
Data make_data(int64_t n, int64_t in, int64_t classes, uint64_t seed) {
  mx::Generator gen(seed);
  const Tensor centres = mx::mul(mx::randn({classes, in}, gen), 2.0);
  Data d;
  d.y = mx::randint(0, classes, {n}, gen);
  d.x = mx::add(mx::embedding(d.y, centres), mx::randn({n, in}, gen)).detach();
  return d;
}

// Trains `model` for `steps` steps in `dt` (bf16 or fp16) autocast; returns the last step's loss.
double train(TinyNet& model, const Data& d, DType dt, int steps) {
  mx::optim::AdamW opt(model.named_parameters(), {.lr = 3e-3});
  mx::amp::GradScaler scaler({.enabled = dt == DType::fp16});  // bf16 needs no loss scaling
  const int64_t micro = 32, accum = 4;
  int64_t next = 0;
  double step_loss = 0;
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    step_loss = 0;
    {
      mx::amp::Autocast ac(dt);  // one region for all four micro-batches
      for (int64_t m = 0; m < accum; ++m, next = (next + micro) % d.x.shape()[0]) {
        const Tensor xb = d.x.slice(0, next, next + micro), yb = d.y.slice(0, next, next + micro);
        const Tensor loss = mx::cross_entropy(model(xb), yb);
        step_loss += loss.item() / double(accum);
        scaler.scale(mx::mul(loss, 1.0 / double(accum))).backward();
      }
    }
    scaler.unscale_(opt);
    mx::optim::clip_grad_norm(opt.parameters(), 1.0);
    scaler.step(opt);
    scaler.update();
  }
  return step_loss;
}

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 100;
  const Data d = make_data(1024, 16, 4, /*seed=*/1);
  for (DType dt : {DType::bf16, DType::fp16}) {
    const std::string dn(mx::name(dt));
    mx::Generator gen(7);
    TinyNet model(16, 64, 4, gen);
    double first;
    {
      mx::NoGradGuard ng;
      first = mx::cross_entropy(model(d.x), d.y).item();
    }
    const double last = train(model, d, dt, steps);
    std::printf("%s: loss %.4f -> %.6f\n", dn.c_str(), first, last);
    if (!(last < first)) {
      std::fprintf(stderr, "the loss did not fall in %s\n", dn.c_str());
      return 1;
    }

    // 2. Save the weights (PyTorch names: fc1.weight, norm.bias, ...), load them into a fresh
    //    model, and run inference with the weights themselves in bf16.
    const auto path = std::filesystem::temp_directory_path() / "mixp_custom_model.safetensors";
    mx::nn::save(model, path);
    mx::Generator other(99);
    TinyNet reloaded(16, 64, 4, other);
    mx::nn::load(reloaded, path);
    mx::nn::convert_module(reloaded, DType::bf16);
    reloaded.eval();
    mx::NoGradGuard ng;
    const Tensor logits = reloaded(d.x.to(DType::bf16, mx::Round::nearest_even));
    const std::vector<double> pred = mx::argmax(logits, 1).to_double_vector(),
                              y = d.y.to_double_vector();
    double acc = 0;
    for (size_t i = 0; i < y.size(); ++i) acc += pred[i] == y[i] ? 1.0 / double(y.size()) : 0.0;
    std::printf("%s: bf16 inference accuracy %.3f (logits in %s)\n", dn.c_str(), acc,
                std::string(mx::name(logits.dtype())).c_str());
    std::filesystem::remove(path);
  }
  return 0;
}
