// The LLaMA-family shapes mixp knows by name (docs/llama.md), each trainable as `--model NAME`
// and planned as `mixp plan --model-shape NAME`:
//   llama-tiny      vocab 256, context 128, width 64, 2 layers, 4 heads on 2 k/v heads, mlp 172
//                   (the tests' model: grouped-query attention at a few seconds of CPU)
//   smollm-135m     HuggingFaceTB/SmolLM-135M's config.json: width 576, 30 layers, 9 heads on 3,
//                   mlp 1536, vocab 49152, context 2048, tied head
//   tinyllama-1.1b  TinyLlama/TinyLlama-1.1B: width 2048, 22 layers, 32 heads on 4, mlp 5632,
//                   vocab 32000, context 2048
//   llama2-7b       meta-llama/Llama-2-7b-hf: width 4096, 32 layers, 32 heads, mlp 11008,
//                   vocab 32000, context 4096
// All with rms_norm_eps 1e-5 and rope_theta 10000, as their config.json files say. `--model
// llama` is llama-tiny's shape.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "mixp/nn/llama.h"

namespace mixp::nn {

std::vector<std::string> llama_preset_names();  // {"llama-tiny", "smollm-135m", ...}
// "llama" or a preset name.
bool is_llama_model(std::string_view name);
// Throws std::invalid_argument naming the presets for another name ("llama" is llama-tiny).
LlamaConfig llama_preset(std::string_view name);

}  // namespace mixp::nn
