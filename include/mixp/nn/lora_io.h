// LoRA adapters in Hugging Face PEFT's layout (docs/lora.md), so that adapters trained by mixp load
// with PeftModel.from_pretrained and adapters from PEFT load here:
//
//   DIR/adapter_model.safetensors   "base_model.model.<module path>.lora_A.weight" [r, in] and
//                                   ".lora_B.weight" [out, r] (PEFT's save_and_load.py drops the
//                                   adapter name "default"), in the adapters' dtype
//   DIR/adapter_config.json         peft_type "LORA", task_type, r, lora_alpha, lora_dropout,
//                                   target_modules, bias "none", fan_in_fan_out, use_rslora,
//                                   base_model_name_or_path, ...
//
// Module paths are the base checkpoint's: for a GPT-2 (nn::Gpt with a tied head, the model of
// nn/gpt2_weights.h) Hugging Face's GPT2LMHeadModel names (blocks.N.attn.qkv ->
// transformer.h.N.attn.c_attn, attn.proj -> c_proj, mlp.fc -> mlp.c_fc, mlp.proj -> mlp.c_proj,
// head -> lm_head), with fan_in_fan_out true as PEFT sets it for GPT-2's Conv1D layers (the
// adapter matrices themselves are stored as nn.Linear's either way; only a merged weight is
// transposed); for other models mixp's own module names. Reading accepts the GPT-2 paths with or
// without "transformer.".
#pragma once
#include <filesystem>
#include <string>

#include "mixp/io/safetensors.h"
#include "mixp/nn/lora.h"
#include "mixp/nn/module.h"

namespace mixp::nn {

// The PEFT module path of a module of `model` (see above).
std::string peft_module_path(Module& model, const std::string& mixp_name);

// Writes the model's adapters into `dir` (created; both files atomically). base_model: the
// base_model_name_or_path field (e.g. the --init-from path; may be empty). Throws
// std::invalid_argument when the model has no adapters; IoError when writing fails.
void save_lora_adapter(Module& model, const LoraOptions& opt, const std::filesystem::path& dir,
                       const std::string& base_model = {});

// The options of a PEFT adapter directory (adapter_config.json): r, lora_alpha, lora_dropout,
// use_rslora; targets: the mixp names of the adapted modules. Throws std::invalid_argument
// naming the file and the field for a malformed or unsupported config (peft_type other than
// LORA, bias other than "none", DoRA, ...).
LoraOptions read_lora_config(Module& model, const std::filesystem::path& dir);

// Attaches the adapter of `dir` to `model` (apply_lora with read_lora_config's options) and loads
// its weights. Every adapted layer needs both matrices of the right shapes ([r, in], [out, r]),
// and the file may hold nothing else; otherwise std::invalid_argument names the file and the
// tensor, and the model is left without adapters only when it had none before (the caller builds a
// fresh model).
void load_lora_adapter(Module& model, const std::filesystem::path& dir, uint64_t seed = 0);

// The metadata key of a model file (a LoRA run's checkpoint model.safetensors) that records the
// --lora spec its "<m>.lora_A.weight" / "<m>.lora_B.weight" tensors were trained with.
inline constexpr const char* kLoraMetadataKey = "mixp.lora";
// Merges every adapter of a mixp-named state file into its base: "<m>.weight" becomes
// W + scaling * B A (in fp32, stored back in W's dtype; PEFT's merge_and_unload) and the adapter
// tensors are removed. A no-op for a file without adapters. Throws std::invalid_argument naming
// `source` when the adapters lack their spec (kLoraMetadataKey), a partner or a base, or have
// shapes that do not fit.
void merge_lora_tensors(SafeTensorsFile& file, const std::string& source);

}  // namespace mixp::nn
