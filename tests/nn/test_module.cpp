// Module mechanics: registration rules, dotted names, traversal order, kinds, train/eval,
// zero_grad, state dicts.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "mixp/nn/nn.h"
#include "nn/nn_test_util.h"

namespace mixp::nn {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> names(const NamedTensors& v) {
  std::vector<std::string> out;
  for (const auto& [n, t] : v) out.push_back(n);
  return out;
}

// A module with its own parameter and two children, to pin the traversal order.
class Toy : public Module {
 public:
  explicit Toy(Generator& g) : Module("toy") {
    scale_ = &register_parameter("scale", ones({3}));
    register_buffer("count", zeros({1}));
    fc = register_module("fc", std::make_shared<Linear>(3, 2, g));
    norm = register_module("norm", std::make_shared<LayerNorm>(2));
  }
  Tensor forward(const Tensor& x) override { return norm->forward(fc->forward(mul(x, *scale_))); }
  std::shared_ptr<Linear> fc;
  std::shared_ptr<LayerNorm> norm;

 private:
  Tensor* scale_;
};

TEST(Module, NamesOrderAndCounts) {
  Generator g(1);
  Toy toy(g);
  EXPECT_THAT(names(toy.named_parameters()),
              ElementsAre("scale", "fc.weight", "fc.bias", "norm.weight", "norm.bias"));
  EXPECT_THAT(names(toy.named_parameters(/*recurse=*/false)), ElementsAre("scale"));
  EXPECT_THAT(names(toy.named_buffers()), ElementsAre("count"));
  EXPECT_EQ(toy.num_parameters(), 3 + 6 + 2 + 2 + 2);
  EXPECT_EQ(toy.parameters().size(), 5u);
  std::vector<std::string> mods, kinds;
  for (auto& [n, m] : toy.named_modules()) {
    mods.push_back(n);
    kinds.push_back(m->kind());
  }
  EXPECT_THAT(mods, ElementsAre("", "fc", "norm"));
  EXPECT_THAT(kinds, ElementsAre("toy", "linear", "layer_norm"));
  EXPECT_EQ(toy.named_children().size(), 2u);
  EXPECT_TRUE(toy.parameter("fc.weight").is_same(toy.fc->weight()));
  EXPECT_EQ(&toy.module("norm"), toy.norm.get());
  EXPECT_THROW(toy.parameter("fc.nope"), std::out_of_range);
  EXPECT_THROW(toy.buffer("nope"), std::out_of_range);
  EXPECT_THROW(toy.module("x.y"), std::out_of_range);
  for (const auto& p : toy.parameters()) {
    EXPECT_TRUE(p.requires_grad());
    EXPECT_TRUE(p.is_leaf());
  }
  EXPECT_THAT(toy.str(), HasSubstr("fc (linear) in=3, out=2"));
}

TEST(Module, RegistrationErrors) {
  Generator g(1);
  Toy toy(g);
  EXPECT_THROW(toy.register_parameter("scale", zeros({1})), std::invalid_argument);  // duplicate
  EXPECT_THROW(toy.register_buffer("fc", zeros({1})), std::invalid_argument);  // taken by a child
  EXPECT_THROW(toy.register_parameter("a.b", zeros({1})), std::invalid_argument);
  EXPECT_THROW(toy.register_parameter("", zeros({1})), std::invalid_argument);
  EXPECT_THROW(toy.register_parameter("u", Tensor()), std::invalid_argument);
  EXPECT_THROW(toy.register_module("m", std::shared_ptr<Module>()), std::invalid_argument);
}

TEST(Module, SharedParametersListedOnce) {
  Generator g(2);
  auto a = std::make_shared<Linear>(2, 2, g);
  Sequential s;
  s.add("a", a).add("b", a);  // the same module twice (tied weights)
  EXPECT_THAT(names(s.named_parameters()), ElementsAre("a.weight", "a.bias"));
  EXPECT_EQ(s.num_parameters(), 6);
}

TEST(Module, TrainEvalRecursesAndZeroGrad) {
  Generator g(3);
  Toy toy(g);
  EXPECT_TRUE(toy.is_training());
  toy.eval();
  EXPECT_FALSE(toy.is_training());
  EXPECT_FALSE(toy.fc->is_training());
  toy.train();
  EXPECT_TRUE(toy.norm->is_training());
  sum(toy.forward(ones({4, 3}))).backward();
  EXPECT_TRUE(toy.fc->weight().grad().defined());
  toy.zero_grad();
  for (const auto& p : toy.parameters()) EXPECT_FALSE(p.grad().defined());
}

TEST(Module, StateDictLoadChecksBeforeCopying) {
  Generator g1(4), g2(5);
  Toy a(g1), b(g2);
  EXPECT_NE(a.fc->weight().to_double_vector(), b.fc->weight().to_double_vector());
  NamedTensors sd = a.state_dict();
  EXPECT_THAT(names(sd),
              ElementsAre("scale", "fc.weight", "fc.bias", "norm.weight", "norm.bias", "count"));
  b.load_state_dict(sd);
  EXPECT_EQ(a.fc->weight().to_double_vector(), b.fc->weight().to_double_vector());
  EXPECT_FALSE(a.fc->weight().is_same(b.fc->weight()));  // values copied, not handles

  Generator g3(6);
  Toy c(g3);
  const auto before = c.fc->weight().to_double_vector();
  NamedTensors bad = sd;
  bad[2].second = zeros({5});  // fc.bias shape
  try {
    c.load_state_dict(bad);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("'fc.bias' has shape [5] but the model's is [2]"));
  }
  EXPECT_EQ(c.fc->weight().to_double_vector(), before);  // nothing changed
  NamedTensors missing(sd.begin(), sd.end() - 1);
  EXPECT_THROW(c.load_state_dict(missing), std::invalid_argument);
  NamedTensors extra = sd;
  extra.emplace_back("ghost", zeros({1}));
  EXPECT_THROW(c.load_state_dict(extra), std::invalid_argument);
  EXPECT_NO_THROW(c.load_state_dict(extra, /*strict=*/false));
}

TEST(Module, InitIsPyTorchDefault) {
  // kaiming-uniform a=sqrt(5) gives U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias.
  Generator g(7);
  Linear fc(400, 300, g);
  const double bound = 1.0 / 20.0;
  double mx = 0, mean = 0, sq = 0;
  for (double v : fc.weight().to_double_vector()) {
    mx = std::max(mx, std::fabs(v));
    mean += v;
    sq += v * v;
  }
  const double n = 400.0 * 300.0;
  EXPECT_LE(mx, bound);
  EXPECT_GT(mx, 0.99 * bound);
  EXPECT_NEAR(mean / n, 0.0, 1e-3);
  EXPECT_NEAR(sq / n, bound * bound / 3, 2e-5);  // variance of U(-b, b) = b^2 / 3
  for (double v : fc.bias().to_double_vector()) EXPECT_LE(std::fabs(v), bound);
  Conv2d conv(4, 8, 3, g);
  for (double v : conv.weight().to_double_vector())
    EXPECT_LE(std::fabs(v), 1.0 / 6.0);  // fan_in 36
  // Same seed, same values; a different seed differs.
  Generator a(9), b(9), c(10);
  EXPECT_EQ(Linear(5, 4, a).weight().to_double_vector(),
            Linear(5, 4, b).weight().to_double_vector());
  EXPECT_NE(Linear(5, 4, c).weight().to_double_vector(),
            Linear(5, 4, a).weight().to_double_vector());
}

}  // namespace
}  // namespace mixp::nn
