// The QLoRA recipes qlora-nf4 and qlora-int4 (registry rows in recipe_registry.cpp; the user's
// guide is docs/lora.md, "QLoRA"). They are the bf16 recipe (Autocast bf16 over fp32 parameters,
// fp32 optimizer states) whose prepare_model also re-encodes every Linear but the head as a frozen
// 4-bit layer (mixp/quant/qlora.h). The adapters (--lora, attached after prepare_model by the
// model factory) are then the only parameters that train: fp32 masters with bf16 compute, as PEFT's
// prepare_model_for_kbit_training + bf16 autocast. A run without --lora is refused in the config
// check (train_config.cpp).
#include <fmt/format.h>

#include "mixp/amp/policy.h"
#include "mixp/nn/module.h"
#include "mixp/quant/qlora.h"
#include "mixp/train/recipe.h"
#include "mixp/train/train_config.h"
#include "train/recipe_factories.h"
#include "util/key_value.h"
#include "util/text.h"

namespace mixp::train {

namespace {

class QloraRecipe final : public PolicyRecipe {
 public:
  QloraRecipe(amp::PrecisionPolicy p, Block4 kind, const RecipeOptions& opt)
      : PolicyRecipe(std::move(p), {}, opt), kind_(kind) {}

  std::string describe() const override {
    return fmt::format(
        "{}: frozen base Linear layers in {} (blocks of 64, double-quantized "
        "scales), dequantized to bf16 per GEMM; adapters fp32 under bf16 autocast",
        name(), kind_ == Block4::nf4 ? "NF4" : "int4");
  }
  void prepare_model(nn::Module& model) const override {
    PolicyRecipe::prepare_model(model);
    try {
      quant::quantize_frozen_base(model, kind_);
    } catch (const std::invalid_argument& e) {
      throw ConfigError(fmt::format("precision {}: {}", name(), e.what()));
    }
  }

 private:
  Block4 kind_;
};

}  // namespace

namespace detail {

std::unique_ptr<PrecisionRecipe> make_qlora_recipe(std::string_view spec,
                                                   const RecipeOptions& opt) {
  const ::mixp::detail::SpecParts parts = ::mixp::detail::split_spec(::mixp::detail::trim(spec));
  const std::string base = ::mixp::detail::lower(parts.base);
  if (!parts.options.empty())
    throw ConfigError(fmt::format("precision {} takes no options, got '{}'", base, parts.options));
  if (!opt.layer_precision.empty())
    throw ConfigError(
        fmt::format("--layer-precision does not apply to {}: its base Linear "
                    "layers are 4-bit and the rest follows the bf16 recipe",
                    base));
  amp::PrecisionPolicy p = amp::parse_policy("bf16");
  p.name = base;
  return std::make_unique<QloraRecipe>(std::move(p),
                                       base == "qlora-int4" ? Block4::int4 : Block4::nf4, opt);
}

}  // namespace detail

}  // namespace mixp::train
