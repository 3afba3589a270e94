// LoRA adapters on GPT-2 against PyTorch (bench/peers/lora_reference.py, PEFT's lora.Linear):
// the same Hugging Face base weights, the same adapter values on c_attn, c_fc (before its GELU)
// and the MLP's c_proj; the fp32 loss agrees within 1e-5 relative and every adapter gradient
// within 1e-4 max-abs (Gpt2VsTorch's tolerances), and the frozen base gets no gradient.
#include <gtest/gtest.h>

#include <cmath>

#include "gpt2/gpt2_fixture.h"
#include "mixp/io/safetensors.h"
#include "mixp/nn/gpt2_weights.h"
#include "mixp/nn/lora.h"
#include "mixp/nn/models.h"
#include "mixp/nn/serialize.h"
#include "mixp/ops/ops.h"
#include "mixp/tensor/factories.h"

namespace mixp::test {
namespace {

Tensor tensor_of(const SafeTensor& s) {
  Tensor t = empty(Shape(s.shape.begin(), s.shape.end()), {.dtype = s.dtype});
  nn::copy_from_safetensor(t, s);
  return t;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const auto x = a.to_double_vector(), y = b.to_double_vector();
  EXPECT_EQ(x.size(), y.size());
  double m = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) m = std::max(m, std::fabs(x[i] - y[i]));
  return m;
}

TEST(LoraVsTorch, AdapterGradientsEqualPeftOnGpt2) {
  TempDir dir;
  const std::string why = make_torch_fixture(dir.path(), "--seq 16 --r 4 --alpha 8",
                                             "lora_reference.py");
  if (!why.empty()) GTEST_SKIP() << "PyTorch reference not generated: " << why;
  const SafeTensorsFile ref = read_safetensors(dir / "reference.safetensors");
  auto model = std::dynamic_pointer_cast<nn::Gpt>(nn::make_model(
      {.name = "gpt2", .width = 64, .layers = 2, .heads = 2, .context = 32, .vocab = 100,
       .seed = 7}));
  nn::load_gpt2_weights(*model, nn::read_gpt2_weights(dir / "model.safetensors", 2),
                        "model.safetensors");
  const auto adapted =
      nn::apply_lora(*model, nn::LoraOptions::parse("r=4,alpha=8,targets=qkv,mlp.fc,mlp.proj"), 1);
  ASSERT_EQ(adapted.size(), 6u);
  int loaded = 0;
  for (auto& [name, p] : model->named_parameters()) {
    if (!p.requires_grad()) continue;
    const SafeTensor* v = ref.find("value." + name);
    ASSERT_NE(v, nullptr) << name;
    nn::copy_from_safetensor(p, *v);
    ++loaded;
  }
  ASSERT_EQ(loaded, 12);
  const Tensor x = tensor_of(*ref.find("x")), y = tensor_of(*ref.find("y"));
  const Tensor logits = (*model)(x);
  const Tensor loss = cross_entropy(logits.reshape({-1, logits.size(-1)}), y.reshape({-1}));
  const double want = tensor_of(*ref.find("loss")).item();
  EXPECT_NEAR(loss.item(), want, 1e-5 * std::fabs(want));
  loss.backward();
  for (const auto& [name, p] : model->named_parameters()) {
    if (!p.requires_grad()) {
      EXPECT_FALSE(p.grad().defined()) << name << " is frozen but got a gradient";
      continue;
    }
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_LE(max_abs_diff(p.grad(), tensor_of(*ref.find("grad." + name))), 1e-4)
        << "gradient of " << name;
  }
}

}  // namespace
}  // namespace mixp::test
