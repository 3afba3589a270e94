// The recipe registry (train/recipe_registry.h) is complete and true: every name round-trips
// through make_recipe, each entry's traits match the recipe it builds, the lists the CLI shows
// come from it, and docs/amp-training.md holds its table.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "mixp/amp/policy.h"
#include "mixp/nn/models.h"
#include "mixp/train/fp8_recipe.h"
#include "mixp/train/recipe.h"
#include "mixp/train/recipe_registry.h"
#include "mixp/train/train_config.h"
#include "common/test_paths.h"

namespace mixp::train {
namespace {

bool narrow(DType d) {
  return d == DType::bf16 || d == DType::fp16;
}

TEST(RecipeRegistry, NamesInTheDocumentedOrder) {
  const std::vector<std::string> names = recipe_names();
  EXPECT_EQ(names, (std::vector<std::string>{"fp64", "fp32", "tf32", "bf16", "bf16-pure", "fp16",
                                             "fp16-o2", "fp16-pure", "fp8", "fp8-current", "mxfp8",
                                             "fp8-block", "nvfp4", "mxfp4", "int8-qat", "int4-qat", "int2-qat", "ternary", "binary", "binary-act", "qlora-nf4", "qlora-int4", "auto"}));
  EXPECT_EQ(available_recipes(), names);
  EXPECT_EQ(planned_recipes(), names);
  // The policy presets amp knows are exactly the policy (and auto) entries.
  std::vector<std::string> presets;
  for (const RecipeTraits& t : recipe_registry())
    if (t.family == RecipeFamily::policy || t.family == RecipeFamily::automatic)
      presets.emplace_back(t.name);
  EXPECT_EQ(amp::preset_names(), presets);
  EXPECT_EQ(fp8_recipe_names(), (std::vector<std::string>{"fp8", "fp8-current", "mxfp8",
                                                         "fp8-block", "nvfp4", "mxfp4"}));
}

// A policy recipe is defined once, by its amp preset (docs/architecture.md 8): the registry's
// first entries are amp's presets in their order, with the preset's name, description and loss
// scaling, and no other entry is of the policy family.
TEST(RecipeRegistry, PolicyEntriesAreAmpsPresets) {
  const std::span<const amp::PolicyPreset> presets = amp::policy_presets();
  const std::span<const RecipeTraits> reg = recipe_registry();
  ASSERT_GT(reg.size(), presets.size());
  for (size_t i = 0; i < presets.size(); ++i) {
    const amp::PolicyPreset& p = presets[i];
    SCOPED_TRACE(p.policy.name);
    EXPECT_EQ(reg[i].name, p.policy.name);
    EXPECT_EQ(reg[i].description, p.description);
    EXPECT_EQ(reg[i].description.data(), p.description.data()) << "the preset's own text";
    EXPECT_EQ(reg[i].family, RecipeFamily::policy);
    EXPECT_EQ(reg[i].loss_scaling, p.policy.loss_scaling == amp::LossScaling::dynamic);
    EXPECT_EQ(amp::find_preset(p.policy.name), &p.policy);
  }
  for (size_t i = presets.size(); i < reg.size(); ++i)
    EXPECT_NE(reg[i].family, RecipeFamily::policy) << reg[i].name;
}

TEST(RecipeRegistry, EveryEntryBuildsTheRecipeItDescribes) {
  for (const RecipeTraits& t : recipe_registry()) {
    SCOPED_TRACE(std::string(t.name));
    EXPECT_FALSE(t.description.empty());
    const std::unique_ptr<PrecisionRecipe> r = make_recipe(t.name);
    if (t.family == RecipeFamily::automatic) {
      EXPECT_EQ(r->name(), amp::auto_preset());
      EXPECT_FALSE(t.dtypes.has_value());
      continue;
    }
    EXPECT_EQ(r->name(), t.name);
    ASSERT_TRUE(t.dtypes.has_value());
    const RecipeDtypes& d = *t.dtypes;
    EXPECT_EQ(r->dtypes(), d);
    EXPECT_EQ(r->param_dtype(), d.params);
    const optim::PrecisionOptions o = r->optimizer_precision();
    if (narrow(d.params)) {
      EXPECT_EQ(o.master_weights, d.master == DType::fp32);
    }
    if (d.params != DType::fp64) {
      EXPECT_EQ(o.state_dtype, d.states);
    }
    EXPECT_EQ(r->skips_nonfinite(), t.loss_scaling);
    EXPECT_EQ(r->loss_scale() != 1.0, t.loss_scaling);
    EXPECT_EQ(dynamic_cast<Fp8TrainingRecipe*>(r.get()) != nullptr, t.family == RecipeFamily::fp8);
    EXPECT_EQ(dynamic_cast<PolicyRecipe*>(r.get()) != nullptr,
              t.family == RecipeFamily::policy || t.family == RecipeFamily::fp8 ||
                  t.family == RecipeFamily::qlora);
    EXPECT_EQ(r->trained_model_label() != "trained", t.accuracy != ReportedModel::trained);
    EXPECT_EQ(&recipe_traits(t.name), &t);
  }
}

TEST(RecipeRegistry, SupportedModelsAreThoseTheRecipePrepares) {
  const nn::ModelConfig small[] = {{.name = "mlp", .width = 8},
                                   {.name = "cnn", .width = 4, .mlp_width = 8},
                                   {.name = "gpt",
                                    .width = 16,
                                    .layers = 1,
                                    .heads = 2,
                                    .context = 8,
                                    .vocab = 16,
                                    .mlp_width = 32}};
  for (const RecipeTraits& t : recipe_registry()) {
    for (const nn::ModelConfig& c : small) {
      SCOPED_TRACE(std::string(t.name) + " on " + c.name);
      auto model = nn::make_model(c);
      const auto r = make_recipe(t.name);
      if (t.supports_model(c.name)) {
        EXPECT_NO_THROW(r->prepare_model(*model));
      } else {
        EXPECT_THROW(r->prepare_model(*model), ConfigError);
        EXPECT_FALSE(t.models_note.empty());
      }
    }
  }
  EXPECT_TRUE(recipe_traits("int8-qat").supports_model("some-new-model"));
}

TEST(RecipeRegistry, SpecsSelectTheirEntry) {
  EXPECT_EQ(find_recipe("bf16:compute=fp16")->name, "bf16");
  EXPECT_EQ(find_recipe("compute=fp16")->name, "fp32") << "keys alone refine fp32";
  EXPECT_EQ(find_recipe(" FP8 : margin=1")->name, "fp8");
  EXPECT_EQ(find_recipe("int8-qat:x=1")->family, RecipeFamily::int8_qat);
  EXPECT_EQ(find_recipe("fp17"), nullptr);
  EXPECT_TRUE(is_recipe_family("mxfp8:block=32", RecipeFamily::fp8));
  EXPECT_FALSE(is_recipe_family("bf16", RecipeFamily::fp8));
  try {
    (void)recipe_traits("fp17:compute=fp16");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown precision 'fp17'; available: fp64, fp32, tf32, "
                                         "bf16, bf16-pure, fp16, fp16-o2, fp16-pure, fp8, "
                                         "fp8-current, mxfp8, fp8-block, nvfp4, mxfp4, int8-qat, int4-qat, int2-qat, ternary, binary, "
                                         "binary-act, qlora-nf4, qlora-int4, auto"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(make_recipe("int8-qat:x=1"), ConfigError);
}

TEST(RecipeRegistry, StudyLists) {
  EXPECT_EQ(
      recipe_names({.study_default = true}),
      (std::vector<std::string>{"fp32", "tf32", "bf16", "fp16", "bf16-pure", "fp8", "int8-qat"}));
  const auto gpt = recipe_names({.model = "gpt", .study_default = true});
  EXPECT_EQ(std::find(gpt.begin(), gpt.end(), "int8-qat"), gpt.end());
  const auto all = recipe_names({.model = "mlp", .with_auto = false});
  EXPECT_EQ(all.size(), recipe_registry().size() - 1);
  EXPECT_EQ(std::find(all.begin(), all.end(), "auto"), all.end());
}

TEST(RecipeRegistry, TheDocsTableIsTheRegistrys) {
  const std::filesystem::path doc =
      std::filesystem::path(MIXP_SOURCE_DIR) / "docs" / "amp-training.md";
  std::ifstream in(doc);
  ASSERT_TRUE(in) << "docs/amp-training.md";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string table = recipe_table_markdown();
  EXPECT_NE(ss.str().find(table), std::string::npos)
      << "docs/amp-training.md's recipe table is out of date; paste this one:\n"
      << table;
  for (const RecipeTraits& t : recipe_registry())
    EXPECT_NE(table.find("| `" + std::string(t.name) + "` |"), std::string::npos) << t.name;
}

}  // namespace
}  // namespace mixp::train
