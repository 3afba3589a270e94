// The built-in models of docs/architecture.md 5b, by name, with the same shapes as
// bench/peers/peer_models.py.
//
//   mlp  [N, 784] or [N, 1, 28, 28] fp32 -> logits [N, 10]
//        flatten, fc1 784->512 ReLU, fc2 512->512 ReLU, head 512->10     (669,706 parameters)
//        width = hidden size (512), layers = hidden layers (2)
//   cnn  [N, 1, 28, 28] fp32 -> logits [N, 10]
//        conv1 1->32 3x3 pad 1, bn1, relu1, pool1 (2); conv2 32->64 3x3 pad 1, bn2, relu2, pool2;
//        flatten, fc1 3136->128 ReLU, head 128->10                        (421,834 parameters)
//        width = conv1 channels (32; conv2 has 2x), mlp_width = fc1 size (128); layers fixed (2)
//   gpt  int32/int64 token ids [B, T] -> logits [B, T, vocab]   (nn/gpt.h)
//        width 256, layers 4, heads 4, context 128, mlp_width 1024, vocab 256 (every byte; the
//        Trainer passes the corpus's vocabulary)
//   gpt2, gpt2-medium  GPT-2 (Radford et al. 2019) at its real sizes, the same Gpt class with a
//        tied head and the vocabulary padded to a multiple of 64 (nn/gpt.h): gpt2 width 768,
//        layers 12, heads 12 (124M parameters at vocab 50257); gpt2-medium width 1024, layers 24,
//        heads 16 (350M); both context 1024 (the most; smaller is allowed), mlp_width 4 x width,
//        vocab 50257 (the Trainer passes the data's: a token file's 50257 or a text corpus's
//        bytes). Any field may be set smaller for tests (`--layers 2 --width 64 --heads 2`).
//   llama, llama-tiny, smollm-135m, tinyllama-1.1b, llama2-7b  the LLaMA family (nn/llama.h) at
//        the shapes of nn/llama_presets.h ("llama" is llama-tiny's); int32/int64 token ids [B, T]
//        -> logits [B, T, vocab]. width, layers, heads, kv_heads, context, vocab and mlp_width
//        override the preset's (the Trainer passes the data's vocabulary).
// ModelConfig fields equal to 0 take the model's default; a field the model does not use must be
// 0 (else std::invalid_argument says which). Init is PyTorch's default for mlp and cnn and GPT-2's
// for gpt, all drawn from Generator(seed): the same config gives bit-identical parameters.
//
// Names are meant for per-layer rules: the final classifier / LM head is kind "head"; ReLU after
// fc layers is fused into their GEMM (Linear's activation), so the mlp has no separate relu
// modules.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mixp/nn/gpt.h"
#include "mixp/nn/llama.h"
#include "mixp/nn/module.h"

namespace mixp::nn {

struct ModelConfig {
  std::string name;
  int64_t width = 0, layers = 0, heads = 0, context = 0, vocab = 0, mlp_width = 0;
  int64_t kv_heads = 0;  // llama family only: grouped-query attention's k/v heads
  uint64_t seed = 0;
  bool checkpointing = false;  // gpt only: checkpoint() each block
};

// {"cnn", "gpt", "gpt2", "gpt2-medium", "llama", "llama-tiny", ..., "mlp"}
std::vector<std::string> model_names();
// Throws std::invalid_argument for an unknown name (listing the known ones) or a bad shape.
std::shared_ptr<Module> make_model(const ModelConfig& cfg);
// cfg with every 0 replaced by the model's default (fields the model does not use stay 0).
ModelConfig resolve_model_config(const ModelConfig& cfg);

// GPT-2's vocabulary (the BPE tokens of llm.c's .bin files) and llm.c's padding multiple.
inline constexpr int64_t kGpt2Vocab = 50257;
inline constexpr int64_t kVocabPadding = 64;
// "gpt2" or "gpt2-medium".
bool is_gpt2_model(std::string_view name);
// vocab rounded up to a multiple of kVocabPadding (50257 -> 50304).
int64_t padded_vocab_size(int64_t vocab);
// The Gpt configuration of a "gpt", "gpt2" or "gpt2-medium" ModelConfig (defaults resolved).
GptConfig gpt_config_of(const ModelConfig& cfg);
// The LlamaConfig of a llama-family ModelConfig (the preset's, with the set fields overridden).
LlamaConfig llama_config_of(const ModelConfig& cfg);

}  // namespace mixp::nn
