// The low-bit QAT recipes on any Module tree (issue 28 item 12): prepare_lowbit_qat's tree form
// (lowbit_qat.h), its signed N-bit input codes (lowbit.h), and the Trainer running it without a
// packed model.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "common/temp_dir.h"
#include "mixp/nn/activation.h"
#include "mixp/nn/linear.h"
#include "mixp/nn/sequential.h"
#include "mixp/ops/ops.h"
#include "mixp/optim/adam.h"
#include "mixp/quant/lowbit_model.h"
#include "mixp/quant/lowbit_qat.h"
#include "mixp/tensor/factories.h"
#include "mixp/train/checkpoint.h"
#include "mixp/train/recipe.h"
#include "mixp/train/tensor_dataset.h"
#include "mixp/train/trainer.h"
#include "quant/qat_train_util.h"

namespace mixp::quant {
namespace {

// A custom model (docs/custom-models.md): layers held by the module itself, two of them inside a
// nested container with a GELU between them; the data flow (a ReLU between body and head) is
// the model's own code.
class TreeNet : public nn::Module {
 public:
  explicit TreeNet(Generator& g) : Module("custom") {
    body_ = register_module("body", std::make_shared<nn::Sequential>());
    body_->add("fc1", std::make_shared<nn::Linear>(8, 32, g));
    body_->add("act", std::make_shared<nn::GELU>());
    body_->add("fc2", std::make_shared<nn::Linear>(32, 32, g));
    head_ = register_module("head", std::make_shared<nn::Linear>(32, 2, g));
  }
  Tensor forward(const Tensor& x) override { return (*head_)(relu((*body_)(x))); }

 private:
  std::shared_ptr<nn::Sequential> body_;
  std::shared_ptr<nn::Linear> head_;
};

// Two classes split by the sign of the first feature.
struct Problem {
  Tensor x, y;
};
Problem separable(Generator& g, int64_t n) {
  Problem p{randn({n, 8}, g), Tensor()};
  const std::vector<float> xs = p.x.to_vector<float>();
  std::vector<int64_t> y;
  for (int64_t i = 0; i < n; ++i) y.push_back(xs[static_cast<size_t>(i * 8)] > 0 ? 1 : 0);
  p.y = from_vector(y, Shape{n}, {.dtype = DType::int64});
  return p;
}

const LowBitLayer& layer(nn::Module& m, const std::string& name) {
  const auto* l = dynamic_cast<const LowBitLayer*>(&m.module(name + ".qat"));
  if (l == nullptr) throw std::logic_error(name + ".qat is not a LowBitLayer");
  return *l;
}

// Adam steps on the whole problem; the losses.
std::vector<double> train(nn::Module& net, const Problem& p, int steps) {
  optim::Adam opt(net.parameters(), {.lr = 1e-2});
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    Tensor loss = cross_entropy(net.forward(p.x), p.y);
    losses.push_back(loss.item<double>());
    loss.backward();
    opt.step();
  }
  return losses;
}

void expect_learns(const std::vector<double>& losses, const char* what) {
  for (const double l : losses) ASSERT_TRUE(std::isfinite(l)) << what;
  std::cout << "    " << what << ": loss " << losses.front() << " -> " << losses.back() << "\n";
  EXPECT_LT(losses.back(), 0.6 * losses.front()) << what;
}

TEST(LowBitTree, Int4PreparesAnyModuleTreeAndTrains) {
  Generator g(7);
  auto net = std::make_shared<TreeNet>(g);
  const auto before = net->named_parameters();
  prepare_lowbit_qat(*net, LowBitConfig{LowBitScheme::int4, {}});
  EXPECT_TRUE(is_lowbit_prepared(*net));
  EXPECT_FALSE(is_lowbit_convertible(*net));
  // Parameters keep their names and tensors (the low-bit layers share them).
  const auto after = net->named_parameters();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(after[i].first, before[i].first);
    EXPECT_TRUE(after[i].second.is_same(before[i].second)) << after[i].first;
  }
  // Found by type under their named_modules() names: int8 at both ends, int4 between, each
  // quantizing its own input with signed codes (of 4 bits for int4).
  EXPECT_EQ(layer(*net, "body.fc1").scheme(), LowBitScheme::int8);
  EXPECT_EQ(layer(*net, "body.fc2").scheme(), LowBitScheme::int4);
  EXPECT_EQ(layer(*net, "head").scheme(), LowBitScheme::int8);
  const ActCodeParams mid = layer(*net, "body.fc2").owned_input_quant()->params();
  EXPECT_EQ(mid.kind, ActCodeKind::signed_bits);
  EXPECT_EQ(mid.bits, 4);
  EXPECT_EQ(layer(*net, "head").owned_input_quant()->params().kind, ActCodeKind::signed8);
  EXPECT_NO_THROW(net->buffer("body.fc2.qat.input_quant.min_val"));
  EXPECT_THROW(prepare_lowbit_qat(*net, LowBitConfig{}), std::invalid_argument);  // twice

  Generator d(11);
  const Problem p = separable(d, 128);
  expect_learns(train(*net, p, 40), "int4 tree");
  std::string missing;
  EXPECT_TRUE(lowbit_observers_calibrated(*net, &missing)) << missing;
  EXPECT_EQ(net->forward(p.x).shape(), (Shape{128, 2}));
  // No packed form: the packed model fuses a Sequential's layers.
  EXPECT_THROW(convert_to_packed(*net), std::invalid_argument);
}

TEST(LowBitTree, BinaryActWithOverridesByName) {
  Generator g(8);
  auto net = std::make_shared<TreeNet>(g);
  prepare_lowbit_qat(
      *net, LowBitConfig{LowBitScheme::binary_act,
                         {{"body.fc1", LowBitScheme::int4}, {"last", LowBitScheme::ternary}}});
  EXPECT_EQ(layer(*net, "body.fc1").scheme(), LowBitScheme::int4);
  EXPECT_EQ(layer(*net, "body.fc2").scheme(), LowBitScheme::binary_act);
  EXPECT_EQ(layer(*net, "head").scheme(), LowBitScheme::ternary);
  EXPECT_EQ(layer(*net, "body.fc2").owned_input_quant()->params().kind, ActCodeKind::sign);
  EXPECT_EQ(layer(*net, "body.fc1").owned_input_quant()->params().bits, 4);
  Generator d(12);
  expect_learns(train(*net, separable(d, 128), 40), "binary-act tree");
}

TEST(LowBitTree, UnknownOverrideNameErrorsAndLeavesTheModel) {
  Generator g(9);
  auto net = std::make_shared<TreeNet>(g);
  try {
    // "fc1" is the Sequential's child name; in this tree the layer is "body.fc1".
    prepare_lowbit_qat(*net, LowBitConfig{LowBitScheme::int4, {{"fc1", LowBitScheme::int2}}});
    FAIL() << "an override naming no layer was accepted";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'fc1'"), std::string::npos) << m;
    EXPECT_NE(m.find("body.fc1, body.fc2, head"), std::string::npos) << m;
  }
  EXPECT_FALSE(is_lowbit_prepared(*net));
  nn::Sequential relus;
  relus.add("act", std::make_shared<nn::ReLU>());
  EXPECT_THROW(prepare_lowbit_qat(relus, LowBitConfig{}), std::invalid_argument);  // no layer
}

TEST(LowBitCodes, SignedBitsAreSymmetricAndMatchSigned8At8Bits) {
  const float scale = lowbit_act_scale(ActCodeKind::signed_bits, 4, -1.0f, 0.5f);
  EXPECT_EQ(scale, 1.0f / 7.5f);
  const Tensor x = from_vector(std::vector<float>{-1.2f, -0.5f, 0.0f, 0.3f, 1.2f}, Shape{5});
  const ActCodeParams p{ActCodeKind::signed_bits, 4, scale};
  EXPECT_EQ(p.qmin(), -8);
  EXPECT_EQ(p.qmax(), 7);
  // x * 7.5: -9 clamps to -8, -3.75 -> -4, 2.25 -> 2, 9 clamps to 7.
  EXPECT_EQ(lowbit_act_codes(x, p).to_vector<float>(),
            (std::vector<float>{-8.0f, -4.0f, 0.0f, 2.0f, 7.0f}));
  // 2 bits, x * 1.5: -1.8 -> -2, -0.75 -> -1, 0.45 -> 0, 1.8 clamps to 1.
  const ActCodeParams two{ActCodeKind::signed_bits, 2,
                          lowbit_act_scale(ActCodeKind::signed_bits, 2, -1.0f, 1.0f)};
  EXPECT_EQ(lowbit_act_codes(x, two).to_vector<float>(),
            (std::vector<float>{-2.0f, -1.0f, 0.0f, 0.0f, 1.0f}));
  const float s8 = lowbit_act_scale(ActCodeKind::signed8, 8, -1.0f, 0.5f);
  EXPECT_EQ(lowbit_act_scale(ActCodeKind::signed_bits, 8, -1.0f, 0.5f), s8);
  EXPECT_EQ(lowbit_act_codes(x, {ActCodeKind::signed_bits, 8, s8}).to_vector<float>(),
            lowbit_act_codes(x, {ActCodeKind::signed8, 8, s8}).to_vector<float>());
  EXPECT_THROW(lowbit_act_codes(x, {ActCodeKind::signed_bits, 1, 1.0f}), std::invalid_argument);
}

// The recipes through the Trainer: a custom model trains with fake quantization, the reported
// accuracy is the fake-quantized model's, and the checkpoint has no packed model.
TEST(LowBitTree, TrainerRunsACustomModelWithoutAPackedModel) {
  for (const char* recipe : {"int4-qat", "binary-act"}) {
    test::TempDir tmp;
    Generator g(10), d(13);
    const Problem p = separable(d, 256);
    auto data = std::make_unique<train::TensorDataset>(
        p.x, p.y, train::TensorDatasetOptions{.batch_size = 32});
    data->set_eval(p.x, p.y);
    train::Trainer t(std::make_shared<TreeNet>(g), train::make_recipe(recipe), std::move(data),
                     {.steps = 16,
                      .lr = 1e-2,
                      .optimizer = "adam",
                      .threads = 1,
                      .save_dir = (tmp / "ck").string()});
    const train::TrainResult r = t.fit();
    ASSERT_TRUE(r.test_accuracy.has_value()) << recipe;
    EXPECT_GT(*r.test_accuracy, 0.6) << recipe;
    EXPECT_TRUE(std::filesystem::exists(tmp / "ck")) << recipe;
    EXPECT_FALSE(std::filesystem::exists(tmp / "ck" / train::kPackedModelFile)) << recipe;
  }
}

TEST(LowBitTree, BuiltInGptIsRefusedAsForInt8Qat) {
  train::TrainConfig c = train::qat_testing::small("gpt", "int4-qat", 0, 0);
  c.model.width = 16;
  c.model.layers = 1;
  c.model.heads = 2;
  c.model.context = 8;
  c.model.mlp_width = 32;
  try {
    train::Trainer t(c);
    FAIL() << "int4-qat trained a gpt";
  } catch (const train::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("int4-qat"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mixp::quant
