// LoRA (nn/lora.h): the --lora spec, target patterns, PEFT's init and scaling, the frozen base,
// gradients against finite differences (GELU-fused and plain layers), and the merged weight.
#include <gtest/gtest.h>

#include <cmath>

#include "common/error_of.h"
#include "mixp/autograd/grad_mode.h"
#include "mixp/nn/lora.h"
#include "mixp/nn/models.h"
#include "mixp/nn/sequential.h"
#include "mixp/ops/ops.h"
#include "mixp/tensor/factories.h"
#include "nn/nn_test_util.h"

namespace mixp::nn {
namespace {

using testing::check_param_grads;
using testing::to_fp64;
using mixp::test::error_of;

std::shared_ptr<Module> tiny_gpt() {
  return make_model(ModelConfig{.name = "gpt", .width = 32, .layers = 2, .heads = 2,
                                .context = 8, .vocab = 20, .mlp_width = 64, .seed = 3});
}

TEST(Lora, ParsesTheSpec) {
  const LoraOptions o = LoraOptions::parse("r=16,alpha=32,dropout=0.05,targets=qkv,attn.proj");
  EXPECT_EQ(o.r, 16);
  EXPECT_EQ(o.alpha, 32);
  EXPECT_EQ(o.dropout, 0.05);
  EXPECT_EQ(o.targets, (std::vector<std::string>{"qkv", "attn.proj"}));
  EXPECT_EQ(o.scaling(), 2.0);
  EXPECT_EQ(LoraOptions::parse(o.str()), o);
  // targets first, keys after it.
  const LoraOptions p = LoraOptions::parse("targets=fc,proj,r=4");
  EXPECT_EQ(p.targets, (std::vector<std::string>{"fc", "proj"}));
  EXPECT_EQ(p.r, 4);
  EXPECT_EQ(p.alpha, 4);  // alpha defaults to r: scaling 1
  EXPECT_EQ(LoraOptions::parse("r=4,alpha=8,rslora=true,targets=fc").scaling(), 4.0);
  for (const char* bad : {"alpha=2,targets=fc", "r=4", "r=0,targets=fc", "r=2.5,targets=fc",
                          "r=4,alpha=-1,targets=fc", "r=4,dropout=1,targets=fc",
                          "r=4,rank=2,targets=fc", "r=4,targets=", "r=x,targets=fc"}) {
    EXPECT_THROW(LoraOptions::parse(bad), std::invalid_argument) << bad;
  }
}

TEST(Lora, TargetsMatchNamesAndSuffixes) {
  EXPECT_TRUE(lora_target_matches("qkv", "blocks.0.attn.qkv"));
  EXPECT_TRUE(lora_target_matches("attn.*", "blocks.0.attn.qkv"));
  EXPECT_TRUE(lora_target_matches("blocks.1.*.proj", "blocks.1.mlp.proj"));
  EXPECT_TRUE(lora_target_matches("q*", "blocks.0.attn.qkv"));
  EXPECT_FALSE(lora_target_matches("kv", "blocks.0.attn.qkv"));  // whole parts only
  EXPECT_FALSE(lora_target_matches("blocks.1.*", "blocks.0.attn.qkv"));
}

TEST(Lora, FreezesTheBaseAndStartsAsTheBase) {
  auto model = tiny_gpt();
  model->train();
  const Tensor x = from_vector(std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}, {1, 8});
  Tensor before;
  {
    NoGradGuard ng;
    before = (*model)(x);
  }
  const auto names = apply_lora(*model, LoraOptions::parse("r=4,alpha=8,targets=qkv,fc"), 11);
  EXPECT_EQ(names, (std::vector<std::string>{"blocks.0.attn.qkv", "blocks.0.mlp.fc",
                                             "blocks.1.attn.qkv", "blocks.1.mlp.fc"}));
  int trainable = 0;
  for (const auto& [name, p] : model->named_parameters()) {
    const bool adapter = name.find(".lora_") != std::string::npos;
    EXPECT_EQ(p.requires_grad(), adapter) << name;
    trainable += adapter;
  }
  EXPECT_EQ(trainable, 8);
  auto& qkv = dynamic_cast<Linear&>(model->module("blocks.0.attn.qkv"));
  const LoraAdapter ad = lora_adapter_of(qkv);
  ASSERT_TRUE(ad.a && ad.b);
  EXPECT_EQ(ad.scaling, 2.0);
  EXPECT_EQ(ad.a->weight().shape(), Shape({4, 32}));
  EXPECT_EQ(ad.b->weight().shape(), Shape({96, 4}));
  // PEFT's init: A kaiming-uniform(a = sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in)), B zero.
  const auto a = ad.a->weight().to_double_vector();
  double amax = 0;
  for (double v : a) amax = std::max(amax, std::fabs(v));
  EXPECT_GT(amax, 0.5 / std::sqrt(32.0));
  EXPECT_LE(amax, 1.0 / std::sqrt(32.0));
  for (double v : ad.b->weight().to_double_vector()) EXPECT_EQ(v, 0.0);
  // B = 0: the adapted model computes exactly the base's output (training mode, no dropout).
  Tensor after;
  {
    NoGradGuard ng;
    after = (*model)(x);
  }
  EXPECT_EQ(before.to_double_vector(), after.to_double_vector());
  // Backward reaches the adapters only.
  Tensor y = (*model)(x);
  sum(y).backward();
  EXPECT_FALSE(qkv.weight().grad().defined());
  EXPECT_TRUE(ad.a->weight().grad().defined());
  EXPECT_TRUE(ad.b->weight().grad().defined());
}

TEST(Lora, PatternThatMatchesNothingListsTheLinearLayers) {
  auto model = tiny_gpt();
  const std::string e = error_of<std::invalid_argument>(
      [&] { apply_lora(*model, LoraOptions::parse("r=4,targets=q_proj"), 1); });
  EXPECT_NE(e.find("'q_proj' matches no Linear layer"), std::string::npos) << e;
  EXPECT_NE(e.find("blocks.0.attn.qkv"), std::string::npos) << e;
  EXPECT_NE(e.find("blocks.1.mlp.proj"), std::string::npos) << e;
  // Nothing was changed by the refused call.
  for (const auto& [name, p] : model->named_parameters()) EXPECT_TRUE(p.requires_grad()) << name;
}

// dL/dA and dL/dB against central differences, through a GELU-fused Linear (the adapter adds
// before the activation) and a plain one, with a non-zero B so that A's gradient is not zero.
TEST(Lora, AdapterGradientsMatchFiniteDifferences) {
  Generator gen(5);
  auto net = std::make_shared<Sequential>();
  net->add("fc", std::make_shared<Linear>(6, 10, gen, LinearOptions{.activation = Activation::gelu}));
  net->add("out", std::make_shared<Linear>(10, 4, gen));
  apply_lora(*net, LoraOptions::parse("r=3,alpha=6,targets=*"), 9);
  ASSERT_EQ(lora_layers(*net).size(), 2u);
  to_fp64(*net);
  for (const auto& [name, l] : lora_layers(*net)) {
    NoGradGuard ng;
    Tensor w = lora_adapter_of(*l).b->weight();
    w.copy_(uniform(w.shape(), -0.5, 0.5, gen, {.dtype = DType::fp64}));
  }
  Tensor x = uniform({5, 6}, -1, 1, gen, {.dtype = DType::fp64}).requires_grad_();
  auto f = [&] { return (*net)(x); };
  for (const auto& [name, l] : lora_layers(*net)) {
    const LoraAdapter ad = lora_adapter_of(*l);
    check_param_grads(*ad.a, f, {x});
    check_param_grads(*ad.b, f);
  }
}

TEST(Lora, MergedWeightComputesTheAdaptedLayer) {
  Generator gen(8);
  Linear lin(6, 5, gen);
  apply_lora(lin, LoraOptions::parse("r=2,alpha=3,targets=*"), 2);
  const LoraAdapter ad = lora_adapter_of(lin);
  {
    NoGradGuard ng;
    Tensor w = ad.b->weight();
    w.copy_(uniform(w.shape(), -0.5, 0.5, gen));
  }
  const Tensor x = uniform({4, 6}, -1, 1, gen);
  NoGradGuard ng;
  const Tensor want = lin(x);
  const Tensor got = linear(x, lora_merged_weight(lin), lin.bias());
  const auto a = want.to_double_vector(), b = got.to_double_vector();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5);
}

}  // namespace
}  // namespace mixp::nn
