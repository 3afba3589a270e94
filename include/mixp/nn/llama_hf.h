// LLaMA-family checkpoints in Hugging Face's layout (docs/llama.md): a directory with
//   config.json                        model_type "llama", "mistral" or "qwen2" and the sizes
//   model.safetensors                  every tensor, or
//   model-0000N-of-0000M.safetensors   shards, listed by
//   model.safetensors.index.json       {"metadata": {"total_size": ...}, "weight_map": {name: shard}}
// Tensor names are HF's: "model.embed_tokens.weight", "model.layers.N.self_attn.q_proj.weight",
// ..., "model.norm.weight", "lm_head.weight" (absent when tie_word_embeddings); stored in F32, BF16
// or F16 (converted to the model's fp32 parameters, exactly).
//
// A checkpoint directory is untrusted input (people download them). Before anything the size of
// the model is allocated: config.json (at most 1 MiB) is parsed with every size bounded; the index
// (at most 64 MiB) may name only plain file names inside the directory (no "/", "\", "..", no
// absolute path, no symlink whose target leaves the directory); every shard's safetensors header
// is read and validated against its file's size (io/safetensors.h); and the names, shapes and
// dtypes of all tensors are checked against the config (a missing or extra tensor, another shape,
// a tensor the index puts in another shard, a shard the index names that does not exist). Only
// then is the model built and each shard read, one at a time. Every failure throws
// std::invalid_argument with one line naming the directory, the file and the tensor.
//
// Writing mirrors save_pretrained: config.json, then model.safetensors when the tensors fit in
// max_shard_bytes, else model-0000N-of-0000M.safetensors shards (a new shard before a tensor that
// would overflow the current one) and the index; tensors in `dtype` (bf16 by default, as
// torch_dtype says), metadata {"format": "pt"}; the directory is written atomically.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mixp/nn/llama.h"

namespace mixp::nn {

struct LlamaHfConfig {
  LlamaConfig model;
  std::string model_type = "llama";  // "llama", "mistral" or "qwen2"
};

// Parses DIR/config.json (or a config.json path). Refused: another model_type, hidden_act other
// than silu, attention_bias/mlp_bias (Llama's optional o_proj/MLP biases), head_dim other than
// hidden_size / num_attention_heads, Qwen2's use_sliding_window, rope_scaling types other than
// linear and llama3. Mistral's sliding_window caps the context at its size (attention within the
// window is then ordinary causal attention).
LlamaHfConfig read_llama_hf_config(const std::filesystem::path& dir);

// HF's names and shapes of the tensors a checkpoint of this config holds, in save order.
std::vector<std::pair<std::string, std::vector<int64_t>>> llama_hf_tensor_shapes(
    const LlamaConfig& cfg);

// Validates DIR as above and builds the model from it.
std::shared_ptr<Llama> read_llama_hf(const std::filesystem::path& dir);
// Validates DIR against `model`'s configuration and loads its weights (all or nothing).
void load_llama_hf(Llama& model, const std::filesystem::path& dir);

struct LlamaHfWriteOptions {
  DType dtype = DType::bf16;                   // fp32, bf16 or fp16
  uint64_t max_shard_bytes = 5'000'000'000;    // save_pretrained's default "5GB"
  // "llama", "mistral" or "qwen2"; empty: qwen2 when the model has q/k/v biases, else llama.
  std::string model_type;
  // config.json's max_position_embeddings; 0: the model's context. A run's context is often
  // shorter than its checkpoint's (at most 1024 by default), and an export keeps the original's.
  int64_t max_position_embeddings = 0;
};
// Returns the number of safetensors files written (1: model.safetensors, no index).
int write_llama_hf(const Llama& model, const std::filesystem::path& dir,
                   const LlamaHfWriteOptions& opt = {});

}  // namespace mixp::nn
