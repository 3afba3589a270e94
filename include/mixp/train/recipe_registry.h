// The recipe registry: one entry per name `mixp train --precision` takes, in the order of
// docs/architecture.md 3.6, with what the rest of mixp needs to know about it (its traits) and the
// factory that builds it. make_recipe, `mixp train --help`, `mixp compare`'s default and `all`
// lists, the study's energy estimate and the recipe table of docs/amp-training.md all read this
// table; docs/architecture.md 8 says how to add a recipe.
//
// A spec selects its entry by the name before a colon ("bf16:compute=fp16" is bf16's, matched in
// any case); keys alone ("compute=fp16") refine fp32. The entry's factory parses the rest.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mixp/train/recipe.h"

namespace mixp::train {

enum class RecipeFamily : uint8_t {
  policy,     // a preset of amp/policy.h, refined by policy keys (PolicyRecipe); the entry is
              // built from amp::policy_presets()'s row, its one definition
  fp8,        // FP8 Linear layers on the bf16 policy (Fp8TrainingRecipe, train/fp8_recipe.h)
  int8_qat,   // fp32 training with fake quantization, converted to int8 at the end
  lowbit_qat,  // fp32 latent weights with fake quantization below 8 bits, packed at the end
  automatic,  // `auto`: the policy preset `mixp doctor` recommends for this CPU
  qlora,      // bf16 LoRA training over a frozen 4-bit base (QloraRecipe, recipe_qlora.cpp)
};

// Which model a run's test_accuracy (gpt: val_loss) is measured on.
enum class ReportedModel : uint8_t {
  trained,         // the trained model
  converted_int8,  // the int8 model converted after training; the trained (fake-quantized) one
                   // is reported as "<trained_model_label()>_accuracy"
  converted_packed,  // the packed low-bit model converted after training (likewise)
};

struct RecipeTraits {
  std::string_view name;
  std::string_view description;  // one line: what it is and when to use it
  RecipeFamily family;
  // The formats of each role as make_recipe(name) trains (nullopt for auto, which depends on
  // the machine). A refined spec may differ: ask the built recipe (PrecisionRecipe::dtypes()).
  std::optional<RecipeDtypes> dtypes;
  bool loss_scaling;  // dynamic loss scaling (non-finite gradients skip the step)
  // Built-in models (nn/models.h) it cannot train, and why; empty when it trains them all.
  std::span<const std::string_view> unsupported_models;
  std::string_view models_note;
  ReportedModel accuracy;
  std::string_view accuracy_note;  // what test_accuracy is, for the study's records
  // Its place in `mixp compare`'s default list (the seeds' order: fp32 tf32 bf16 fp16 bf16-pure
  // fp8 int8-qat; kStudyDefault in recipe_registry.cpp), 0 when not in it.
  int study_order;
  // Builds the recipe from the whole spec ("fp8:margin=1"); throws ConfigError.
  std::unique_ptr<PrecisionRecipe> (*make)(std::string_view spec, const RecipeOptions& opt);

  // False for a built-in model listed in unsupported_models; other names are accepted (the model
  // factory reports unknown ones).
  bool supports_model(std::string_view model) const;
};

// Every entry, in the order of docs/architecture.md 3.6.
std::span<const RecipeTraits> recipe_registry();

// The entry a spec selects (see the top of this file), or null for an unknown name.
const RecipeTraits* find_recipe(std::string_view spec);
// The same, throwing ConfigError for an unknown name ("unknown precision 'x'; available: ...").
const RecipeTraits& recipe_traits(std::string_view spec);
// True when `spec` selects an entry of `family`.
bool is_recipe_family(std::string_view spec, RecipeFamily family);

// Which names recipe_names() lists.
struct RecipeFilter {
  std::string_view model = {};  // those that can train this built-in model ("": every one)
  bool study_default = false;   // only those of `mixp compare`'s default list, in its order
  bool with_auto = true;        // `auto` too (it resolves to one of the others)
};
// The names of the entries the filter keeps, in the registry's order (study_default: in the
// default list's order).
std::vector<std::string> recipe_names(const RecipeFilter& filter = {});

// The recipe table of docs/amp-training.md ("Which recipe"), as Markdown; a test checks that the
// document holds exactly this.
std::string recipe_table_markdown();

}  // namespace mixp::train
