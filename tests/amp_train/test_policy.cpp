// Precision policies: the presets, jmp-style policy strings, per-layer rules and their errors, and
// what apply_policy does to a model's storage and forward pass.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/error_of.h"
#include "mixp/amp/autocast.h"
#include "mixp/amp/layer_precision.h"
#include "mixp/amp/policy.h"
#include "mixp/format/cpu_features.h"
#include "mixp/nn/models.h"
#include "mixp/tensor/factories.h"

namespace mixp::amp {
namespace {

using ::testing::HasSubstr;

template <class F>
std::string error_of(F&& f) {
  return ::mixp::test::error_of<PolicyError>(f);
}

// A gpt of `layers` blocks, 2 heads, context 8 and an MLP twice `width`.
std::shared_ptr<nn::Module> small_gpt(int64_t width, int64_t layers, int64_t vocab) {
  nn::ModelConfig c{.name = "gpt", .width = width, .layers = layers, .heads = 2};
  c.context = 8;
  c.vocab = vocab;
  c.mlp_width = 2 * width;
  return nn::make_model(c);
}

TEST(Policy, PresetsMatchTheirDefinitions) {
  const PrecisionPolicy fp32 = parse_policy("fp32");
  EXPECT_EQ(fp32.mode(), "full");
  EXPECT_EQ(fp32.loss_scaling, LossScaling::none);
  const PrecisionPolicy bf16 = parse_policy("bf16");
  EXPECT_EQ(bf16.params, DType::fp32);
  EXPECT_EQ(bf16.compute, DType::bf16);
  EXPECT_TRUE(bf16.autocast);
  EXPECT_EQ(bf16.loss_scaling, LossScaling::none);  // bf16 has fp32's exponent range
  const PrecisionPolicy fp16 = parse_policy("fp16");
  EXPECT_TRUE(fp16.autocast);
  EXPECT_EQ(fp16.loss_scaling, LossScaling::dynamic);
  EXPECT_EQ(fp16.loss_scale, 65536.0);
  EXPECT_EQ(fp16.growth_interval, 2000);
  const PrecisionPolicy o2 = parse_policy("fp16-o2");
  EXPECT_EQ(o2.params, DType::fp16);
  EXPECT_TRUE(o2.master_weights);
  EXPECT_TRUE(o2.norm_fp32);
  EXPECT_EQ(o2.mode(), "mixed");
  const PrecisionPolicy o3 = parse_policy("fp16-pure");
  EXPECT_EQ(o3.mode(), "pure");
  EXPECT_FALSE(o3.master_weights);
  const PrecisionPolicy bp = parse_policy("bf16-pure");
  EXPECT_EQ(bp.params, DType::bf16);
  EXPECT_EQ(bp.states, DType::bf16);
  EXPECT_EQ(bp.rounding, Round::stochastic);
  EXPECT_FALSE(bp.master_weights);
  EXPECT_EQ(bp.loss_scaling, LossScaling::none);
  const PrecisionPolicy tf32 = parse_policy("tf32");
  EXPECT_EQ(tf32.compute, DType::tf32);
  EXPECT_EQ(parse_policy("fp64").params, DType::fp64);
}

TEST(Policy, AutoFollowsTheCpu) {
  const PrecisionPolicy a = parse_policy("auto");
  const CpuFeatures& f = cpu_features();
  const bool bf16 = (f.avx512_bf16 && f.os_avx512) || (f.amx_bf16 && f.os_amx);
  EXPECT_EQ(a.name, bf16 ? "bf16" : "fp32");
  EXPECT_EQ(a.name, auto_preset());
}

TEST(Policy, JmpStyleStringsRefineAPreset) {
  const PrecisionPolicy p = parse_policy("bf16:params=fp32,compute=bf16,output=fp32");
  EXPECT_EQ(p.name, "bf16:params=fp32,compute=bf16,output=fp32");
  EXPECT_TRUE(p.autocast);
  // Keys alone refine fp32, with jmp's spellings.
  const PrecisionPolicy q = parse_policy("params=float32,compute=bfloat16,output=float32");
  EXPECT_EQ(q.compute, DType::bf16);
  EXPECT_TRUE(q.autocast);
  EXPECT_EQ(q.loss_scaling, LossScaling::none);
  // fp16 anywhere turns dynamic loss scaling on unless said otherwise.
  EXPECT_EQ(parse_policy("params=fp32,compute=half").loss_scaling, LossScaling::dynamic);
  EXPECT_EQ(parse_policy("fp16:loss_scale=none").loss_scaling, LossScaling::none);
  const PrecisionPolicy fixed = parse_policy("fp16-pure:loss_scale=1");  // Apex O3's default
  EXPECT_EQ(fixed.loss_scaling, LossScaling::fixed);
  EXPECT_EQ(fixed.loss_scale, 1.0);
  const PrecisionPolicy k = parse_policy("bf16-pure:rounding=nearest,kahan=on,states=fp32");
  EXPECT_TRUE(k.kahan);
  EXPECT_EQ(k.rounding, Round::nearest_even);
  EXPECT_EQ(k.states, DType::fp32);
  const PrecisionPolicy g = parse_policy("fp16:loss_scale_init=1024,growth_interval=50");
  EXPECT_EQ(g.loss_scale, 1024.0);
  EXPECT_EQ(g.growth_interval, 50);
  const PrecisionPolicy b =
      parse_policy("fp16:loss_scale_min=0,loss_scale_max=1e6,collapse_after=5");
  EXPECT_EQ(b.loss_scale_min, 0.0);
  EXPECT_EQ(b.loss_scale_max, 1e6);
  EXPECT_EQ(b.collapse_after, 5);
  EXPECT_THAT(error_of([] { parse_policy("bf16:loss_scale_max=1e6"); }),
              HasSubstr("needs dynamic loss scaling"));
  EXPECT_THAT(error_of([] { parse_policy("fp16:loss_scale_min=8,loss_scale_max=4"); }),
              HasSubstr("above loss_scale_max"));
  // Pure bf16 params with fp32 compute is not expressible without autocast; with master weights
  // and autocast it is a mixed recipe.
  EXPECT_EQ(parse_policy("params=bf16,compute=bf16").mode(), "pure");
  EXPECT_EQ(parse_policy("params=bf16,compute=bf16,autocast=on").mode(), "mixed");
}

TEST(Policy, BadStringsNameTheAlternatives) {
  // The policy presets only: the other recipe names are train::make_recipe's (its registry).
  EXPECT_THAT(error_of([] { parse_policy("bf17"); }),
              HasSubstr("unknown policy preset 'bf17'; presets: fp64, fp32, tf32, bf16, bf16-pure, "
                        "fp16, fp16-o2, fp16-pure, auto, or a policy string"));
  EXPECT_THAT(error_of([] { parse_policy("fp8"); }), HasSubstr("built by train::make_recipe"));
  EXPECT_EQ(parse_policy("BF16").name, "bf16") << "preset names are matched in any case";
  EXPECT_THAT(error_of([] { parse_policy("bf16:speed=max"); }),
              HasSubstr("unknown policy key 'speed'; keys: params, compute, output"));
  EXPECT_THAT(error_of([] { parse_policy("bf16:params=int8"); }),
              HasSubstr("policy key 'params' takes fp64|fp32|bf16|fp16, got 'int8'"));
  EXPECT_THAT(error_of([] { parse_policy("bf16:params"); }), HasSubstr("is not key=value"));
  EXPECT_THAT(error_of([] { parse_policy("bf16:master=maybe"); }), HasSubstr("on or off"));
  EXPECT_THAT(error_of([] { parse_policy("bf16-pure:master=on,kahan=on"); }),
              HasSubstr("kahan=on replaces fp32 master weights"));
  EXPECT_THAT(error_of([] { parse_policy("fp32:compute=fp64"); }),
              HasSubstr("fp64 is the reference"));
  EXPECT_THAT(error_of([] { parse_policy("bf16:loss_scale=-3"); }), HasSubstr("positive number"));
  EXPECT_THAT(error_of([] { parse_policy("bf16:growth_interval=10"); }),
              HasSubstr("needs dynamic loss scaling"));
  EXPECT_THAT(error_of([] { parse_policy("fp32:rounding=stochastic"); }),
              HasSubstr("needs params=bf16 or params=fp16"));
  EXPECT_THAT(error_of([] { parse_policy("bf16:params=fp32,params=bf16"); }),
              HasSubstr("given twice"));
}

TEST(LayerRules, ParseAndErrors) {
  const auto rules = parse_layer_precision("embed=fp32, attn=bf16,mlp=bfloat16,head=fp32");
  ASSERT_EQ(rules.size(), 4u);
  EXPECT_EQ(rules[0].key, "embed");
  EXPECT_EQ(rules[2].dtype, DType::bf16);
  EXPECT_THAT(error_of([] { parse_layer_precision("mlp=fp8"); }),
              HasSubstr("a layer can run in fp32, bf16 or fp16 (fp8 layers need an FP8 recipe"));
  EXPECT_THAT(error_of([] { parse_layer_precision("mlp"); }), HasSubstr("is not layer=dtype"));
  EXPECT_TRUE(parse_layer_precision("").empty());
  // Under an FP8 recipe, fp8 is a layer dtype too.
  const auto fp8 = parse_layer_precision("head=fp8,embed=fp32,fc1=E4M3", /*fp8_layers=*/true);
  ASSERT_EQ(fp8.size(), 3u);
  EXPECT_EQ(fp8[0].dtype, DType::fp8_e4m3);
  EXPECT_EQ(fp8[1].dtype, DType::fp32);
  EXPECT_EQ(fp8[2].dtype, DType::fp8_e4m3);
  // A recipe's own name marks its layers ("*=nvfp4"); train/fp8_recipe.cpp checks that it is the
  // running recipe's. Another fp8 format is not a layer dtype.
  EXPECT_EQ(parse_layer_precision("head=mxfp8", true)[0].dtype, DType::fp8_e4m3);
  EXPECT_EQ(parse_layer_precision("*=nvfp4", true)[0].dtype, DType::fp8_e4m3);
  EXPECT_THAT(error_of([] { parse_layer_precision("head=fp8_e5m2", true); }),
              HasSubstr("under an FP8 recipe a layer runs in fp8"));
}

// One precedence for every rule: the nearest module with a rule (itself, else its ancestors);
// on one module a name rule beats a kind rule, and of one sort the last rule wins.
TEST(LayerRules, ResolverPrecedence) {
  auto gpt = small_gpt(16, 2, 16);
  const std::vector<LayerRule> rules = {{"blocks.0", DType::fp32},         // 0: a block by name
                                        {"attn", DType::bf16},             // 1: every attention
                                        {"linear", DType::fp16},           // 2: kind
                                        {"blocks.1.mlp.fc", DType::fp32},  // 3: name
                                        {"linear", DType::bf16}};          // 4: kind again, later
  const LayerRuleResolver r(*gpt, rules);
  EXPECT_EQ(r.rule_for("blocks.0"), 0u);
  EXPECT_EQ(r.rule_for("blocks.0.ln1"), 0u) << "inherited from the block";
  EXPECT_EQ(r.rule_for("blocks.0.attn"), 1u) << "deeper rule wins";
  EXPECT_EQ(r.rule_for("blocks.1.mlp.fc"), 3u) << "name beats kind on one module";
  EXPECT_EQ(r.rule_for("blocks.1.mlp.proj"), 4u) << "the last kind rule wins";
  EXPECT_EQ(r.own_rule("blocks.1.mlp"), std::nullopt);
  EXPECT_EQ(r.rule_for(""), std::nullopt);
  EXPECT_TRUE(module_covers("blocks.1", "blocks.1.mlp.fc"));
  EXPECT_TRUE(module_covers("", "head"));
  EXPECT_FALSE(module_covers("blocks.1", "blocks.10"));
  const LayerRuleResolver none(*gpt, std::vector<LayerRule>{{"conv", DType::fp32}});
  EXPECT_TRUE(none.matches(0).empty());
}

// `*` is the model itself: a name rule on the root, so it decides exactly the modules no other
// rule covers, whatever the order of the rules.
TEST(LayerRules, StarIsTheRestOfTheModel) {
  auto gpt = small_gpt(16, 2, 16);
  const auto rules = parse_layer_precision("*=fp32, head=bf16,embed=bf16", /*fp8_layers=*/true);
  ASSERT_EQ(rules.size(), 3u);
  EXPECT_EQ(rules[0].key, "*");
  EXPECT_EQ(modules_matching(*gpt, rules[0]), (std::vector<std::string>{""}));
  const LayerRuleResolver r(*gpt, rules);
  EXPECT_EQ(r.rule_for(""), 0u);
  EXPECT_EQ(r.rule_for("blocks.1.mlp.fc"), 0u) << "the rest";
  EXPECT_EQ(r.rule_for("blocks.0.ln1"), 0u);
  EXPECT_EQ(r.rule_for("head"), 1u) << "a module's own rule beats the model's";
  EXPECT_EQ(r.rule_for("tok_emb"), 2u);
  // Written last, `*` still only takes what the other rules leave.
  const LayerRuleResolver last(*gpt, parse_layer_precision("head=bf16,*=fp16"));
  EXPECT_EQ(last.rule_for("head"), 0u);
  EXPECT_EQ(last.rule_for("blocks.0.attn.qkv"), 1u);
  // Applied: under the bf16 recipe, `*=fp32,head=bf16` keeps everything but the head in fp32.
  auto m = small_gpt(16, 2, 16);
  apply_policy(*m, parse_policy("bf16-pure"), parse_layer_precision("*=fp32,head=bf16"));
  EXPECT_EQ(m->parameter("blocks.0.mlp.fc.weight").dtype(), DType::fp32);
  EXPECT_EQ(m->parameter("head.weight").dtype(), DType::bf16);
}

TEST(LayerRules, AKeyThatMatchesNothingNamesWhatTheModelHas) {
  auto mlp = nn::make_model({.name = "mlp", .width = 16});
  const std::string e = error_of(
      [&] { apply_policy(*mlp, parse_policy("bf16"), parse_layer_precision("attn=bf16")); });
  EXPECT_THAT(e, HasSubstr("'attn' matches no module of this model"));
  EXPECT_THAT(e, HasSubstr("head"));
  EXPECT_THAT(e, HasSubstr("linear"));
  EXPECT_THAT(e, HasSubstr("fc1"));
  EXPECT_THAT(error_of([&] {
                apply_policy(*mlp, parse_policy("fp64"), parse_layer_precision("fc1=fp32"));
              }),
              HasSubstr("fp64"));
}

TEST(LayerRules, SelectByKindAliasAndName) {
  auto gpt = small_gpt(32, 2, 20);
  EXPECT_EQ(modules_matching(*gpt, {"embed", DType::fp32}),
            (std::vector<std::string>{"tok_emb", "pos_emb"}));
  EXPECT_EQ(modules_matching(*gpt, {"attn", DType::bf16}),
            (std::vector<std::string>{"blocks.0.attn", "blocks.1.attn"}));
  EXPECT_EQ(modules_matching(*gpt, {"blocks.1", DType::bf16}),
            (std::vector<std::string>{"blocks.1"}));
  EXPECT_EQ(modules_matching(*gpt, {"head", DType::fp32}), (std::vector<std::string>{"head"}));
  EXPECT_EQ(modules_matching(*gpt, {"norm", DType::fp32}).size(), 5u);  // 2 per block + ln_f
}

TEST(ApplyPolicy, StorageFollowsPresetAndRules) {
  auto gpt = small_gpt(32, 1, 20);
  apply_policy(*gpt, parse_policy("bf16-pure"), parse_layer_precision("embed=fp32,head=fp32"));
  EXPECT_EQ(gpt->parameter("tok_emb.weight").dtype(), DType::fp32);
  EXPECT_EQ(gpt->parameter("head.weight").dtype(), DType::fp32);
  EXPECT_EQ(gpt->parameter("blocks.0.attn.qkv.weight").dtype(), DType::bf16);
  EXPECT_EQ(gpt->parameter("ln_f.weight").dtype(), DType::bf16);
  // The forward pass works across the boundaries: fp32 embeddings feed bf16 blocks (the region
  // casts its output back... to the recipe's bf16 for integer inputs), the fp32 head gets bf16.
  Tensor idx = from_vector(std::vector<int64_t>{1, 2, 3, 4}, {1, 4});
  Tensor y = (*gpt)(idx);
  EXPECT_EQ(y.dtype(), DType::fp32);  // output=fp32
  EXPECT_EQ(y.shape(), (Shape{1, 4, 20}));

  // fp16-o2 keeps BatchNorm in fp32.
  auto cnn = nn::make_model({.name = "cnn", .width = 4, .mlp_width = 8});
  apply_policy(*cnn, parse_policy("fp16-o2"));
  EXPECT_EQ(cnn->parameter("conv1.weight").dtype(), DType::fp16);
  EXPECT_EQ(cnn->parameter("bn1.weight").dtype(), DType::fp32);
  EXPECT_EQ(cnn->buffer("bn1.running_var").dtype(), DType::fp32);
  Tensor out;
  {
    Autocast ac(DType::fp16);
    out = (*cnn)(zeros({2, 1, 28, 28}));
  }
  EXPECT_EQ(out.dtype(), DType::fp32);

  // Mixed recipes keep fp32 storage whatever the rules say (Autocast casts per op).
  auto mlp = nn::make_model({.name = "mlp", .width = 16});
  apply_policy(*mlp, parse_policy("bf16"), parse_layer_precision("head=fp32,fc1=fp16"));
  for (const auto& [n, p] : mlp->named_parameters()) EXPECT_EQ(p.dtype(), DType::fp32) << n;
  EXPECT_TRUE(needs_fp16_loss_scaling(parse_policy("bf16"), parse_layer_precision("fc1=fp16")));
  EXPECT_FALSE(needs_fp16_loss_scaling(parse_policy("bf16"), parse_layer_precision("fc1=fp32")));
}

TEST(ApplyPolicy, LayerRegionsRunInTheirDtype) {
  // Under bf16 autocast, a head kept in fp32 produces fp32 logits from an fp32 GEMM, and the
  // result differs from the all-bf16 head.
  auto a = nn::make_model({.name = "mlp", .width = 16, .seed = 4});
  auto b = nn::make_model({.name = "mlp", .width = 16, .seed = 4});
  apply_policy(*a, parse_policy("bf16"));
  apply_policy(*b, parse_policy("bf16"), parse_layer_precision("fc1=fp32,fc2=fp32,head=fp32"));
  auto c = nn::make_model({.name = "mlp", .width = 16, .seed = 4});  // plain fp32
  Generator g(1);
  Tensor x = randn({8, 784}, g);
  Tensor ya, yb, yc = (*c)(x);
  {
    Autocast ac(DType::bf16);
    ya = (*a)(x);
    yb = (*b)(x);
  }
  EXPECT_EQ(yb.to_vector(), yc.to_vector());  // every layer in fp32: exactly the fp32 model
  EXPECT_NE(ya.to_vector(), yc.to_vector());
}

}  // namespace
}  // namespace mixp::amp
