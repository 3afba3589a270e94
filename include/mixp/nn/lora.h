// LoRA: low-rank adapters on a model's Linear layers (Hu et al. 2021), with the semantics of
// Hugging Face PEFT's lora.Linear (src/peft/tuners/lora/layer.py) so that adapters trained here
// load there and back (docs/lora.md):
//
//   y = act(x W^T + b + scaling * B(A(dropout(x))))     scaling = alpha / r (rsLoRA: alpha/sqrt(r))
//
// A [r, in] is drawn kaiming-uniform with a = sqrt(5) (torch.nn.Linear's init, PEFT's
// init_lora_weights=True), B [out, r] starts at zero, so the adapted model starts as the base.
// The dropout (torch.nn.Dropout, identity when p = 0) acts on the input of A only.
//
// apply_lora attaches the adapter to each target Linear as child modules "lora_A", "lora_B" (and
// "lora_dropout" when p > 0), so that the adapter's parameters are "<module>.lora_A.weight" and
// "<module>.lora_B.weight" (PEFT's names without its adapter name "default") and travel with the
// model's state_dict (checkpoints, resume). Every other parameter of the model is frozen
// (requires_grad false): it gets no gradient, and a Trainer gives the optimizer only the
// parameters that require a gradient. The adapters take the dtype of the weight they adapt; call
// apply_lora after a recipe's prepare_model, so that the adapters' GEMMs stay those of the
// recipe's autocast and not its FP8 implementation (which runs the frozen base only).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mixp/nn/linear.h"
#include "mixp/nn/module.h"

namespace mixp::nn {

struct LoraOptions {
  int64_t r = 8;               // rank
  double alpha = 8;            // lora_alpha
  double dropout = 0;          // lora_dropout, on the input of A
  bool use_rslora = false;     // scaling alpha / sqrt(r) instead of alpha / r
  std::vector<std::string> targets;  // glob patterns on module names or their dotted suffixes

  double scaling() const;
  // "r=16,alpha=32,dropout=0.05,targets=qkv,proj" (the --lora flag); parse throws
  // std::invalid_argument naming the bad key or value. Unknown keys are errors; targets takes the
  // rest of the string (its patterns are separated by commas too).
  static LoraOptions parse(std::string_view spec);
  std::string str() const;
  bool operator==(const LoraOptions&) const = default;
};

// Whether `pattern` (a glob: * ? [..]) matches the dotted module name or one of its suffixes
// after a dot ("qkv" and "attn.*" match "blocks.0.attn.qkv"), as PEFT's target_modules do.
bool lora_target_matches(std::string_view pattern, std::string_view module_name);

// The adapter of one Linear (its children).
struct LoraAdapter {
  Linear* a = nullptr;
  Linear* b = nullptr;
  double scaling = 1;
};

// Attaches adapters to every Linear (not already an adapter) whose name a target matches, freezes
// every other parameter, and returns the adapted modules' names in model order. seed: the stream
// A's init and the dropout masks come from. Throws std::invalid_argument when a pattern matches
// no Linear (listing the model's Linear names), when r <= 0, alpha <= 0, dropout outside [0, 1),
// or when the model already has adapters.
std::vector<std::string> apply_lora(Module& model, const LoraOptions& opt, uint64_t seed);

// The adapter of `layer`, or a null a/b when it has none.
LoraAdapter lora_adapter_of(Linear& layer);
// The adapted Linear layers of a model, by name, in model order.
std::vector<std::pair<std::string, Linear*>> lora_layers(Module& model);

// W + scaling * B A of one adapted layer (W's dtype; computed in fp32), the merged weight PEFT's
// merge_and_unload writes.
Tensor lora_merged_weight(Linear& layer);

}  // namespace mixp::nn
