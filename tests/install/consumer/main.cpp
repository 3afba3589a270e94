// A new user's program, built against the INSTALLED package (find_package(mixp), -Wall -Wextra
// -Werror): a custom Module on the user's own tensors, trained through the Trainer in bf16 and in
// fp16 (GradScaler), a hand-written step with gradient accumulation inside one autocast region,
// saved, reloaded into a fresh model, and run in bf16. Issue 16's "done when", as a test.
#include <mixp/mixp.h>  // the umbrella: the installed headers compile on their own, warning-free

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

namespace mx = mixp;
using mx::DType;
using mx::Tensor;

class Net : public mx::nn::Module {
 public:
  explicit Net(mx::Generator& g) : Module("mlp") {
    fc1_ = register_module("fc1", std::make_shared<mx::nn::Linear>(8, 32, g));
    act_ = register_module("act", std::make_shared<mx::nn::GELU>());
    fc2_ = register_module("fc2", std::make_shared<mx::nn::Linear>(32, 3, g));
  }
  Tensor forward(const Tensor& x) override { return (*fc2_)((*act_)((*fc1_)(x))); }

 private:
  std::shared_ptr<mx::nn::Linear> fc1_, fc2_;
  std::shared_ptr<mx::nn::GELU> act_;
};

// The training part through the Trainer (what issue 16 wants in at most 30 lines).
double train_with(const std::string& recipe, std::shared_ptr<Net> model, const Tensor& x,
                  const Tensor& y) {
  auto data = std::make_unique<mx::train::TensorDataset>(
      x, y, mx::train::TensorDatasetOptions{.batch_size = 16});
  mx::train::TrainOptions opt;
  opt.steps = 30;
  opt.grad_accum = 2;
  opt.lr = 1e-2;
  opt.evaluate = false;
  mx::train::Trainer trainer(model, mx::train::make_recipe(recipe), std::move(data), opt);
  return trainer.fit().final_loss;
}

int main() {
  const auto b =
      mx::bfloat16::from_double(3.14159265, mx::Round::nearest_even, mx::Overflow::ieee);
  std::printf("bf16(3.14159265) = %.9g bits 0x%04X\n", b.to_float(), static_cast<unsigned>(b.bits));

  mx::Generator g(1);
  const Tensor centres = mx::mul(mx::randn({3, 8}, g), 2.0);
  const Tensor y = mx::randint(0, 3, {256}, g);
  const Tensor x = mx::add(mx::embedding(y, centres), mx::randn({256, 8}, g)).detach();
  double first = 0;
  for (const char* recipe : {"bf16", "fp16"}) {
    mx::Generator init(2);
    auto model = std::make_shared<Net>(init);
    {
      mx::NoGradGuard ng;
      first = mx::cross_entropy((*model)(x), y).item();
    }
    const double last = train_with(recipe, model, x, y);
    std::printf("%s through the Trainer: loss %.4f -> %.4f\n", recipe, first, last);
    if (!(last < first)) return 1;
  }

  // By hand: four micro-batches inside one bf16 autocast region, then one optimizer step.
  mx::Generator init(3);
  Net model(init);
  mx::optim::AdamW opt(model.named_parameters(), {.lr = 1e-2});
  {
    mx::amp::Autocast ac(DType::bf16);
    for (int64_t m = 0; m < 4; ++m) {
      const Tensor loss = mx::cross_entropy(model(x.slice(0, m * 64, m * 64 + 64)),
                                            y.slice(0, m * 64, m * 64 + 64));
      mx::mul(loss, 0.25).backward();
    }
  }
  opt.step();

  // Save, reload into a fresh model, infer in bf16.
  const auto path = std::filesystem::temp_directory_path() / "mixp_consumer.safetensors";
  mx::nn::save(model, path);
  mx::Generator other(4);
  Net reloaded(other);
  mx::nn::load(reloaded, path);
  std::filesystem::remove(path);
  mx::nn::convert_module(reloaded, DType::bf16);
  mx::NoGradGuard ng;
  const Tensor logits = reloaded(x.to(DType::bf16, mx::Round::nearest_even));
  const Tensor same = model(x);
  std::printf("bf16 inference: %s logits, argmax of sample 0: %lld (fp32 model: %lld)\n",
              std::string(mx::name(logits.dtype())).c_str(),
              static_cast<long long>(mx::argmax(logits.slice(0, 0, 1)).item()),
              static_cast<long long>(mx::argmax(same.slice(0, 0, 1)).item()));
  return logits.dtype() == DType::bf16 ? 0 : 1;
}
