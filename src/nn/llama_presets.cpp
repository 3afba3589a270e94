#include "mixp/nn/llama_presets.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>

namespace mixp::nn {

namespace {
struct Preset {
  const char* name;
  LlamaConfig cfg;
};

LlamaConfig shape(int64_t vocab, int64_t context, int64_t width, int64_t layers, int64_t heads,
                  int64_t kv_heads, int64_t mlp_width, bool tied) {
  LlamaConfig c;
  c.vocab = vocab;
  c.context = context;
  c.width = width;
  c.layers = layers;
  c.heads = heads;
  c.kv_heads = kv_heads;
  c.mlp_width = mlp_width;
  c.tied_head = tied;
  return c;
}

const std::vector<Preset>& presets() {
  static const std::vector<Preset> p = {
      {"llama-tiny", shape(256, 128, 64, 2, 4, 2, 172, false)},
      {"smollm-135m", shape(49152, 2048, 576, 30, 9, 3, 1536, true)},
      {"tinyllama-1.1b", shape(32000, 2048, 2048, 22, 32, 4, 5632, false)},
      {"llama2-7b", shape(32000, 4096, 4096, 32, 32, 32, 11008, false)},
  };
  return p;
}
}  // namespace

std::vector<std::string> llama_preset_names() {
  std::vector<std::string> n;
  for (const auto& p : presets()) n.emplace_back(p.name);
  return n;
}

bool is_llama_model(std::string_view name) {
  if (name == "llama") return true;
  for (const auto& p : presets())
    if (name == p.name) return true;
  return false;
}

LlamaConfig llama_preset(std::string_view name) {
  if (name == "llama") return presets().front().cfg;
  for (const auto& p : presets())
    if (name == p.name) return p.cfg;
  throw std::invalid_argument(fmt::format("mixp::nn::llama_preset: unknown LLaMA preset '{}'; "
                                          "known: llama, {}",
                                          name, fmt::join(llama_preset_names(), ", ")));
}

}  // namespace mixp::nn
