// The FP8 training recipes of `mixp train --precision` (docs/fp8.md):
//
//   fp8          TE DelayedScaling: HYBRID (E4M3 activations and weights, E5M2 gradients),
//                amax_compute_algo max, margin 0, but an amax history of 16 steps, not TE's
//                1024 (amp::Fp8Recipe says why); "fp8:preset=te" is TE's recipe exactly
//   fp8-current  TE Float8CurrentScaling: HYBRID, scale from each tensor's own amax
//   mxfp8        TE MXFP8BlockScaling: E4M3, blocks of 32 along K with e8m0 scales
//
// What runs in FP8 follows TransformerEngine: the Linear layers (te.Linear; in the gpt, the
// attention's qkv and output projections and the MLP's two layers) run their three GEMMs in FP8
// (amp::fp8_linear). Everything else runs as the bf16 recipe runs it: fp32 parameters (the
// masters), Autocast bf16 for the other GEMMs (convolutions, attention's q k^T and P v, the
// head), fp32 for softmax, norms and the loss; embeddings look up fp32 rows. The model's head
// (kind "head") stays out of FP8 as in TE's and the seeds' practice of keeping the output layer
// in higher precision. No loss scaling: the gradients that are quantized (E5M2) get their own
// per-tensor (or per-block) scale, which a loss scale would only cancel, and the rest of the
// backward is bf16/fp32 with fp32's exponent range.
//
// Options, after a colon (like the policy strings of amp/policy.h):
//   fp8:amax_history=16,amax_algo=most_recent,margin=1,format=e4m3
//   fp8:preset=te                 TE's DelayedScaling defaults (amp::Fp8Recipe::te_delayed());
//                                 the other keys refine the preset, wherever they stand
//   mxfp8:block=32,format=hybrid
// preset, amax_history and amax_algo are for fp8 (delayed) only, margin for fp8 and fp8-current, block
// for mxfp8 only; format is hybrid or e4m3. Any other key refines the bf16 base policy
// (e.g. "fp8:output=bf16").
//
// --layer-precision: the rules of amp/layer_precision.h (fp32, bf16, fp16) take a layer out of
// FP8 and run it in that precision; a rule with the value fp8 puts the selected layers' Linears
// in FP8 ("head=fp8"). Precedence as there (amp::LayerRuleResolver): the rule on the deepest
// module covering a Linear wins; on one module a name rule beats a kind rule; otherwise the last
// rule wins.
//
// Checkpoints: delayed scaling keeps its state (per layer: input, weight and grad_output amax
// histories, scales and scale_invs) as buffers of the layers, so it is saved in
// model.safetensors as "fc1.fp8_input_amax_history", ... and checked by name and shape on load.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mixp/amp/fp8_scaling.h"
#include "mixp/train/recipe.h"

namespace mixp::train {

// True when `spec` names an FP8 recipe ("fp8", "fp8-current", "mxfp8", with or without options):
// an entry of family fp8 in train/recipe_registry.h.
bool is_fp8_recipe(std::string_view spec);
// The FP8 recipe names, in the registry's order.
const std::vector<std::string>& fp8_recipe_names();

class Fp8TrainingRecipe final : public PolicyRecipe {
 public:
  // `scaling` is the recipe's FP8 scaling before the spec's keys refine it (the registry's entry
  // for the spec's name passes it: make_recipe("fp8-current") gives Fp8Recipe::current()).
  // Throws ConfigError for unknown keys or values, options of another scaling, rules that
  // cannot be parsed, and loss-scale options (there is no loss scaling).
  Fp8TrainingRecipe(std::string_view spec, const RecipeOptions& opt, const amp::Fp8Recipe& scaling);

  std::string name() const override { return name_; }
  std::string describe() const override;
  RecipeDtypes dtypes() const override;
  void prepare_model(nn::Module& model) const override;
  std::unique_ptr<ForwardScope> forward_scope() const override;
  void update(bool skipped) override;

  const amp::Fp8Recipe& fp8() const { return fp8_; }
  // The Linear layers prepare_model put in FP8, by dotted name (after prepare_model).
  const std::vector<std::string>& fp8_layers() const { return fp8_layers_; }

 private:
  struct Parsed {
    std::string name;
    amp::Fp8Recipe fp8;
    amp::PrecisionPolicy base;
    std::vector<amp::LayerRule> rules;      // the non-fp8 rules, for PolicyRecipe
    std::vector<amp::LayerRule> all_rules;  // every rule in order; fp8 ones carry fp8_e4m3
  };
  static Parsed parse(std::string_view spec, const RecipeOptions& opt,
                      const amp::Fp8Recipe& scaling);
  Fp8TrainingRecipe(Parsed p, const RecipeOptions& opt);

  std::string name_;
  amp::Fp8Recipe fp8_;
  // Every --layer-precision rule in order; fp8 rules carry DType::fp8_e4m3.
  std::vector<amp::LayerRule> all_rules_;
  mutable std::vector<std::string> fp8_layers_;
};

}  // namespace mixp::train
