// mixp's GPT-2 against PyTorch on the same weights (bench/peers/gpt2_reference.py): the weights go
// through the Hugging Face import (nn/gpt2_weights.h), the batch through the model; the fp32 loss
// must agree within 1e-5 relative, every parameter gradient within 1e-4 max-abs (llm.c's
// test_gpt2 checks its C model against PyTorch the same way), and the bf16 autocast loss within
// 1e-2 relative of PyTorch's bf16 autocast loss. The vocabulary (100) pads to 128 rows, so the
// padding and the tied head are both on the path.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "gpt2/gpt2_fixture.h"
#include "mixp/amp/autocast.h"
#include "mixp/autograd/grad_mode.h"
#include "mixp/io/safetensors.h"
#include "mixp/nn/gpt2_weights.h"
#include "mixp/nn/models.h"
#include "mixp/nn/serialize.h"
#include "mixp/ops/ops.h"
#include "mixp/tensor/factories.h"

namespace mixp::test {
namespace {

// The model both sides build; `extra` goes to gpt2_reference.py as it is (batch, seq, seed,
// --prefix).
struct Config {
  int64_t vocab = 100, context = 32, width = 64, layers = 2, heads = 2;
  std::string extra;
  std::string args() const {
    return "--vocab " + std::to_string(vocab) + " --context " + std::to_string(context) +
           " --width " + std::to_string(width) + " --layers " + std::to_string(layers) +
           " --heads " + std::to_string(heads) + " " + extra;
  }
};

std::shared_ptr<nn::Gpt> make_gpt2(const Config& k) {
  nn::ModelConfig c{.name = "gpt2",
                    .width = k.width,
                    .layers = k.layers,
                    .heads = k.heads,
                    .context = k.context,
                    .vocab = k.vocab,
                    .seed = 7};
  return std::dynamic_pointer_cast<nn::Gpt>(nn::make_model(c));
}

Tensor tensor_of(const SafeTensor& s) {
  Tensor t = empty(Shape(s.shape.begin(), s.shape.end()), {.dtype = s.dtype});
  nn::copy_from_safetensor(t, s);
  return t;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const Tensor fa = a.to(DType::fp32).contiguous(), fb = b.to(DType::fp32).contiguous();
  double m = 0;
  for (int64_t i = 0; i < fa.numel(); ++i)
    m = std::max(m, double(std::fabs(fa.data<float>()[i] - fb.data<float>()[i])));
  return m;
}

Tensor loss_of(nn::Gpt& model, const Tensor& x, const Tensor& y) {
  const Tensor logits = model(x);
  return cross_entropy(logits.reshape({-1, logits.size(-1)}), y.reshape({-1}));
}

void check_against_torch(const Config& k) {
  TempDir dir;
  const std::string why = make_torch_fixture(dir.path(), k.args());
  if (!why.empty()) GTEST_SKIP() << "PyTorch reference not generated: " << why;
  const SafeTensorsFile ref = read_safetensors(dir / "reference.safetensors");
  auto model = make_gpt2(k);
  nn::load_gpt2_weights(*model, nn::read_gpt2_weights(dir / "model.safetensors", k.heads),
                        "model.safetensors");
  const Tensor x = tensor_of(*ref.find("x")), y = tensor_of(*ref.find("y"));

  const Tensor loss = loss_of(*model, x, y);
  const double want = tensor_of(*ref.find("loss")).item();
  EXPECT_NEAR(loss.item(), want, 1e-5 * std::fabs(want)) << "fp32 loss";
  loss.backward();
  int checked = 0;
  for (const auto& [name, p] : model->named_parameters()) {
    const SafeTensor* g = ref.find("grad." + name);
    ASSERT_NE(g, nullptr) << "the reference has no gradient for " << name;
    ASSERT_TRUE(p.grad().defined()) << name;
    Tensor mine = p.grad();
    if (name == "tok_emb.weight") {
      // The padded rows (vocab..) get no gradient: no token and no used logit touches them.
      EXPECT_EQ(max_abs_diff(mine.slice(0, k.vocab, mine.size(0)),
                             zeros({mine.size(0) - k.vocab, k.width})),
                0.0);
      mine = mine.slice(0, 0, k.vocab);
    }
    EXPECT_LE(max_abs_diff(mine, tensor_of(*g)), 1e-4) << "gradient of " << name;
    ++checked;
  }
  EXPECT_EQ(checked, 2 + 12 * k.layers + 2);

  NoGradGuard no_grad;
  amp::Autocast autocast(DType::bf16);
  const double bf16 = loss_of(*model, x, y).item();
  const double want_bf16 = tensor_of(*ref.find("loss_bf16")).item();
  EXPECT_NEAR(bf16, want_bf16, 1e-2 * std::fabs(want_bf16)) << "bf16 autocast loss";
}

TEST(Gpt2VsTorch, FromHuggingFaceLayout) {
  check_against_torch({.extra = "--seq 16"});
}

TEST(Gpt2VsTorch, FromHuggingFaceLayoutWithTransformerPrefix) {
  check_against_torch({.extra = "--seq 32 --batch 3 --seed 5 --prefix"});
}

// 512 tokens of width 256: under bf16 autocast the forward GEMMs are large enough for mixp's own
// bf16 kernel on CPUs that run it (src/backend/cpu/gemm_bf16.h), so the bf16 loss checks it
// against PyTorch's autocast (oneDNN there).
TEST(Gpt2VsTorch, Bf16LossAtSizesOfTheOwnGemm) {
  check_against_torch({.vocab = 1000,
                       .context = 128,
                       .width = 256,
                       .layers = 1,
                       .heads = 4,
                       .extra = "--seq 128 --batch 4 --seed 9"});
}

}  // namespace
}  // namespace mixp::test
