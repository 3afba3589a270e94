// Applying a precision policy to a model: parameter storage, per-layer rules and the casts at the
// model's and each overridden layer's boundary (jmp's per-module policies, in mixp's terms).
//
// Per-layer rules: "key=dtype,..." with dtype fp32, bf16 or fp16. A key selects modules
//   - by kind (nn/module.h): embedding, attention, mlp, block, linear, conv2d, layer_norm,
//     batch_norm2d, lstm, head, ...; aliases: embed -> embedding, attn -> attention,
//     conv -> conv2d, ln -> layer_norm, bn -> batch_norm2d, norm -> layer_norm and batch_norm2d;
//   - or by dotted name (fc1, head, blocks.0, blocks.0.attn.qkv).
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
#include <string>
#include <string_view>
#include <vector>

#include "mixp/amp/policy.h"
#include "mixp/tensor/tensor.h"

namespace mixp::nn {
class Module;
}

namespace mixp::amp {

struct LayerRule {
  std::string key;  // as written (alias or kind or dotted name)
  DType dtype;      // fp32, bf16 or fp16
};

// Parses "embed=fp32,attn=bf16". Throws PolicyError for a malformed entry or a dtype other than
// fp32/bf16/fp16 (fp8 names the recipes it comes with).
std::vector<LayerRule> parse_layer_precision(std::string_view spec);

// The modules one rule selects in `model` (dotted names, "" for the model itself). Empty when
// it matches nothing.
std::vector<std::string> modules_matching(nn::Module& model, const LayerRule& rule);

// Converts parameters and buffers to the policy's storage dtypes (rules included) and installs
// the forward wrappers described above (replacing any the modules had). Throws PolicyError when
// a rule matches no module, naming the kinds and names the model has, or when the policy takes
// no rules (fp64). Idempotent: applying it again to the same model gives the same result.
void apply_policy(nn::Module& model, const PrecisionPolicy& policy,
                  const std::vector<LayerRule>& rules = {});

// True when the policy or one of the rules stores or computes something in fp16 (so gradients
// need loss scaling).
bool needs_fp16_loss_scaling(const PrecisionPolicy& policy, const std::vector<LayerRule>& rules);

// Converts one floating tensor to `dtype` in place: the TensorImpl keeps its identity (every
// handle, e.g. an optimizer's, sees the change), nearest-even rounding, the gradient is dropped.
void convert_tensor_in_place(Tensor& t, DType dtype);

}  // namespace mixp::amp
