// The factories of the recipe registry's entries (recipe_registry.cpp), one per family, each next
// to the recipe it builds. Each takes the whole spec and throws ConfigError.
#pragma once
#include <memory>
#include <string_view>

#include "mixp/amp/fp8_scaling.h"
#include "mixp/train/recipe.h"

namespace mixp::train::detail {

// recipe.cpp: a policy preset or policy string (and `auto`), with --layer-precision rules.
std::unique_ptr<PrecisionRecipe> make_policy_recipe(std::string_view spec,
                                                    const RecipeOptions& opt);
// fp8_recipe.cpp: an FP8 recipe whose scaling starts from `scaling` (its spec's keys refine it).
std::unique_ptr<PrecisionRecipe> make_fp8_recipe(std::string_view spec, const RecipeOptions& opt,
                                                 const amp::Fp8Recipe& scaling);
// recipe_int8_qat.cpp.
std::unique_ptr<PrecisionRecipe> make_int8_qat_recipe(std::string_view spec,
                                                      const RecipeOptions& opt);
// recipe_lowbit_qat.cpp: int4-qat, int2-qat, ternary, binary, binary-act (by the spec's name).
std::unique_ptr<PrecisionRecipe> make_lowbit_qat_recipe(std::string_view spec,
                                                        const RecipeOptions& opt);

// The formats of each role a policy trains with: PolicyRecipe::dtypes() and the registry's rows
// of the policy presets (recipe_registry.cpp) both read this one rule.
RecipeDtypes policy_dtypes(const amp::PrecisionPolicy& p);

// recipe_qlora.cpp: qlora-nf4, qlora-int4 (by the spec's name).
std::unique_ptr<PrecisionRecipe> make_qlora_recipe(std::string_view spec,
                                                   const RecipeOptions& opt);

}  // namespace mixp::train::detail
