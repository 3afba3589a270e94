// Applying a precision policy to a model: parameter storage, per-layer rules and the casts at the
// model's and each overridden layer's boundary (jmp's per-module policies, in mixp's terms).
//
// Per-layer rules: "key=dtype,..." with dtype fp32, bf16 or fp16. A key selects modules
//   - by kind (nn/module.h): embedding, attention, mlp, block, linear, conv2d, layer_norm,
//     batch_norm2d, lstm, head, ...; aliases: embed -> embedding, attn -> attention,
//     conv -> conv2d, ln -> layer_norm, bn -> batch_norm2d, norm -> layer_norm and batch_norm2d;
//   - by dotted name (fc1, head, blocks.0, blocks.0.attn.qkv);
//   - or `*`: the model itself, so its rule decides every module that no other rule covers
//     (`head=bf16,embed=bf16,*=fp8` under an FP8 recipe: everything but the head and the
//     embedding in FP8). A name rule.
// A name rule beats a kind rule on the same module; among rules of the same sort the last wins.
// A rule covers its module's whole subtree, and a rule on a module deeper inside overrides it
// there (`blocks.0=fp32,attn=bf16`: block 0 in fp32 except its attention).
//
// What a rule does, by the recipe's mode (PrecisionPolicy::mode()):
//   mixed (Autocast recipes: bf16, fp16, fp16-o2): the module's forward runs in its own Autocast
//     region of that dtype; for fp32, autocast is off inside and floating inputs are widened to
//     fp32. Parameters keep the recipe's storage (fp32, or fp16 for fp16-o2: there an fp32 rule
//     stores the module's parameters in fp32 too).
//   pure (bf16-pure, fp16-pure): the module's parameters are stored in the rule's dtype, its
//     floating input is cast to it, and its output is cast back to the dtype of the input (to
//     the recipe's compute dtype for integer inputs: an embedding), so neighbours see the dtype
//     they expect.
//   full (fp32, tf32): a bf16/fp16 rule runs the module under Autocast of that dtype; an fp32
//     rule under tf32 turns TF32 off inside the module.
// fp64 (the reference) takes no rules.
//
// The model's own boundary: in pure mode its floating input is cast to the compute dtype; in
// every mode a floating output is cast to PrecisionPolicy::output. These are installed as
// nn::Module forward wrappers, so they apply when the model (and its children) are called
// through operator() — as the Trainer and every built-in model do.
#pragma once
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mixp/amp/policy.h"
#include "mixp/tensor/tensor.h"

namespace mixp::nn {
class Module;
}

namespace mixp::amp {

// The key that selects the model itself (its rule covers every module not covered otherwise).
inline constexpr std::string_view kWholeModelKey = "*";

struct LayerRule {
  std::string key;  // as written (alias or kind or dotted name)
  DType dtype;      // fp32, bf16 or fp16 (fp8_e4m3: "fp8" under an FP8 recipe)
};

// Parses "embed=fp32,attn=bf16". With `fp8_layers` (the FP8 recipes of train/fp8_recipe.h) a rule
// may also say fp8 (or fp8_e4m3, e4m3, or a recipe's name: mxfp8, fp8-block, nvfp4, mxfp4), which
// gives DType::fp8_e4m3 (the recipe's quantized Linear). Throws PolicyError for a
// malformed entry or a dtype the rules do not take (fp8 without `fp8_layers` names the recipes it
// comes with).
std::vector<LayerRule> parse_layer_precision(std::string_view spec, bool fp8_layers = false);

// The modules one rule selects in `model` (dotted names, "" for the model itself). Empty when
// it matches nothing.
std::vector<std::string> modules_matching(nn::Module& model, const LayerRule& rule);

// True when module `outer` contains module `inner` or is it (dotted names; "" is the model).
bool module_covers(std::string_view outer, std::string_view inner);

// Which rule decides each module, for apply_policy and the FP8 recipes alike: the rule on the
// module itself, else the one on its nearest ancestor (a rule covers its module's subtree, and a
// rule deeper inside overrides it there); among the rules on one module a name rule beats a kind
// rule, and among rules of the same sort the last wins.
class LayerRuleResolver {
 public:
  // Matches every rule against `model` once; a rule that matches nothing is kept (matches(i) is
  // empty) for the caller to report.
  LayerRuleResolver(nn::Module& model, std::span<const LayerRule> rules);
  // The modules rule `i` selects.
  const std::vector<std::string>& matches(size_t i) const { return matches_.at(i); }
  // The index of the rule on `module` itself, if any.
  std::optional<size_t> own_rule(const std::string& module) const;
  // The index of the rule in effect at `module`: its own, else its nearest ancestor's.
  std::optional<size_t> rule_for(const std::string& module) const;

 private:
  std::vector<std::vector<std::string>> matches_;
  std::map<std::string, size_t> own_;  // module -> index of its own rule
};

// Converts parameters and buffers to the policy's storage dtypes (rules included) and installs
// the forward wrappers described above (replacing any the modules had). Throws PolicyError when
// a rule matches no module, naming the kinds and names the model has, or when the policy takes
// no rules (fp64). Idempotent: applying it again to the same model gives the same result.
void apply_policy(nn::Module& model, const PrecisionPolicy& policy,
                  const std::vector<LayerRule>& rules = {});

// True when the policy or one of the rules stores or computes something in fp16 (so gradients
// need loss scaling).
bool needs_fp16_loss_scaling(const PrecisionPolicy& policy, const std::vector<LayerRule>& rules);

}  // namespace mixp::amp
