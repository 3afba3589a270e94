// Export of a LLaMA-family checkpoint to a Hugging Face directory (train/export_hf.h).
#include "mixp/train/export_hf.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <stdexcept>

#include "mixp/autograd/grad_mode.h"
#include "mixp/nn/llama.h"
#include "mixp/nn/llama_presets.h"
#include "mixp/nn/lora.h"
#include "mixp/nn/lora_io.h"
#include "mixp/nn/models.h"
#include "mixp/train/checkpoint.h"
#include "mixp/train/recipe.h"
#include "mixp/train/recipe_registry.h"
#include "trainer_impl.h"

namespace mixp::train {

namespace fs = std::filesystem;

uint64_t parse_byte_size(std::string_view text) {
  const std::string t(text);
  size_t i = 0;
  while (i < t.size() && (std::isdigit(static_cast<unsigned char>(t[i])) || t[i] == '.')) ++i;
  const std::string num = t.substr(0, i), unit = t.substr(i);
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "KB") scale = 1e3;
  else if (unit == "MB") scale = 1e6;
  else if (unit == "GB") scale = 1e9;
  else if (unit == "KiB") scale = 1024.0;
  else if (unit == "MiB") scale = 1024.0 * 1024;
  else if (unit == "GiB") scale = 1024.0 * 1024 * 1024;
  double v = 0;
  size_t used = 0;
  try {
    v = num.empty() ? 0 : std::stod(num, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (scale == 0 || num.empty() || used != num.size() || !(v * scale >= 1) || v * scale > 1e18) {
    throw std::invalid_argument(fmt::format(
        "'{}' is not a size: give bytes, or a number with KB, MB, GB (10^3, 10^6, 10^9) or KiB, "
        "MiB, GiB, e.g. 5GB or 500MB",
        text));
  }
  return static_cast<uint64_t>(std::llround(v * scale));
}

HfExportResult export_checkpoint_hf(const fs::path& checkpoint, const fs::path& out,
                                    const HfExportOptions& opt) {
  const CheckpointFiles ck = read_checkpoint(checkpoint);
  const TrainConfig& c = ck.config;
  const std::string where = checkpoint.string();
  if (!nn::is_llama_model(c.model.name)) {
    throw ConfigError(fmt::format(
        "{} is a {} checkpoint; --layout hf exports LLaMA-family checkpoints to a directory (a "
        "gpt2 checkpoint's model.safetensors converts as a file: mixp convert {}/{} -o "
        "gpt2.safetensors --layout hf)",
        where, c.model.name, where, kModelFile));
  }
  if (is_recipe_family(c.precision, RecipeFamily::qlora)) {
    throw ConfigError(fmt::format(
        "{} was trained with --precision {}: its base is stored in 4 bits, which the Hugging "
        "Face layout has no place for; merge its adapters into the unquantized base instead: "
        "mixp convert {} --layout hf ... needs a bf16/fp32 checkpoint, or save the adapters "
        "(--lora-out) and give them with --lora-from to the export of the base's checkpoint",
        where, c.precision, where));
  }
  std::error_code ec;
  if (fs::exists(out, ec) && fs::equivalent(out, checkpoint, ec)) {
    throw ConfigError(fmt::format("the output {} is the checkpoint folder itself", out.string()));
  }
  const std::unique_ptr<PrecisionRecipe> recipe = check_checkpoint_config(ck);
  const std::shared_ptr<nn::Module> model = detail::build_model(c, *recipe, /*with_init=*/false);
  const SafeTensorsFile weights = ck.safetensors(kModelFile);
  check_checkpoint_weights(ck, weights, model.get());
  load_module_state(*model, weights, (checkpoint / kModelFile).string());
  const bool own = !nn::lora_layers(*model).empty();
  if (!opt.lora_from.empty()) {
    if (own) {
      throw ConfigError(fmt::format(
          "{} was trained with --lora {}: its adapters are merged already; --lora-from adds "
          "another adapter only to a checkpoint without one",
          where, c.lora));
    }
    nn::load_lora_adapter(*model, opt.lora_from);
  }
  HfExportResult r;
  {
    NoGradGuard ng;
    for (auto& [name, lin] : nn::lora_layers(*model)) {
      const Tensor merged = nn::lora_merged_weight(*lin);
      Tensor base = lin->weight();  // a handle on the layer's weight
      base.copy_(merged);
      ++r.merged_layers;
    }
  }
  const auto* llama = dynamic_cast<const nn::Llama*>(model.get());
  if (!llama) throw ConfigError(where + ": the checkpoint's model is not a nn::Llama");
  nn::LlamaHfWriteOptions w = opt.write;
  if (!c.init_from.empty()) {
    // The family and the context of the directory the run started from (a Mistral stays a
    // Mistral; max_position_embeddings is not the run's shorter --context).
    try {
      const nn::LlamaHfConfig from = nn::read_llama_hf_config(c.init_from);
      if (w.model_type.empty()) w.model_type = from.model_type;
      if (w.max_position_embeddings == 0) w.max_position_embeddings = from.model.context;
    } catch (const std::invalid_argument&) {
      // The directory is gone: the architecture is the model's (llama, or qwen2 with biases).
    }
  }
  r.config = llama->config();
  r.model_type = w.model_type.empty() ? (r.config.qkv_bias ? "qwen2" : "llama") : w.model_type;
  for (const auto& [name, shape] : nn::llama_hf_tensor_shapes(r.config)) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    r.parameters += n;
  }
  r.shards = nn::write_llama_hf(*llama, out, w);
  return r;
}

}  // namespace mixp::train
