// The low-bit QAT recipes int4-qat, int2-qat, ternary, binary and binary-act: fp32 training of
// latent weights with low-bit fake quantization (quant/lowbit_qat.h), batch norm and observers
// frozen at the int8-qat epochs, and at the end a packed model (quant/lowbit_model.h) whose test
// accuracy is the one reported. docs/quantization.md, "Below 8 bits".
#include <fmt/format.h>

#include "mixp/quant/lowbit_model.h"
#include "mixp/quant/lowbit_qat.h"
#include "mixp/quant/qat.h"
#include "mixp/train/checkpoint.h"
#include "train/recipe_qat.h"
#include "util/key_value.h"

namespace mixp::train::detail {

namespace {

class LowBitQatRecipe final : public QatRecipe {
 public:
  LowBitQatRecipe(std::string name, quant::LowBitConfig cfg, QatEpochs epochs)
      : QatRecipe(std::move(name), epochs), cfg_(std::move(cfg)) {}

  void prepare_model(nn::Module& model) const override {
    refuse_unsupported_builtin(model);
    PrecisionRecipe::prepare_model(model);
    try {
      quant::prepare_lowbit_qat(model, cfg_);
    } catch (const std::invalid_argument& e) {
      throw unsupported_model(e.what());
    }
  }

  void save_extra(nn::Module& model, const std::filesystem::path& dir) const override {
    if (!quant::lowbit_observers_calibrated(model)) return;  // no step done yet
    // A custom model, prepared layer by layer: fake quantization only, nothing to pack.
    if (!quant::is_lowbit_convertible(model)) return;
    quant::save_packed_model(*quant::convert_to_packed(model), dir / kPackedModelFile);
  }

 protected:
  void set_observers_enabled(nn::Module& model, bool on) const override {
    quant::set_lowbit_observers_enabled(model, on);
  }
  std::shared_ptr<nn::Module> convert(nn::Module& trained) const override {
    // A model prepared layer by layer (quant/lowbit_qat.h: any Module tree) has no packed form
    // (the packed model fuses the Sequential's layers): it is evaluated as trained, with fake
    // quantization (nullptr: no separate inference model), as int8-qat does.
    if (!quant::is_lowbit_convertible(trained)) return nullptr;
    return quant::convert_to_packed(trained);
  }

 private:
  quant::LowBitConfig cfg_;
};

quant::LowBitScheme scheme_of(std::string_view recipe) {
  if (recipe == "int4-qat") return quant::LowBitScheme::int4;
  if (recipe == "int2-qat") return quant::LowBitScheme::int2;
  if (recipe == "ternary") return quant::LowBitScheme::ternary;
  if (recipe == "binary") return quant::LowBitScheme::binary;
  return quant::LowBitScheme::binary_act;
}

}  // namespace

std::unique_ptr<PrecisionRecipe> make_lowbit_qat_recipe(std::string_view spec,
                                                        const RecipeOptions& opt) {
  const ::mixp::detail::SpecParts parts = ::mixp::detail::split_spec(spec);
  const std::string name = parts.base;
  if (parts.has_colon) {
    throw ConfigError(fmt::format(
        "precision '{}' takes no policy keys (it trains in fp32 with low-bit fake "
        "quantization); its options are --layer-precision, --qat-freeze-bn-epoch and "
        "--qat-disable-observer-epoch",
        name));
  }
  refuse_loss_scaling(opt, name);
  quant::LowBitConfig cfg;
  cfg.scheme = scheme_of(name);
  try {
    const ::mixp::detail::KeyValueSyntax syntax{
        .list = "--layer-precision",
        .entry = "layer=format",
        .example = "'first=int4,fc1=binary'",
        .noun = "layer",
        .keys = {},
        .lower_keys = false};
    for (const auto& kv : ::mixp::detail::split_key_values(opt.layer_precision, syntax)) {
      cfg.overrides[kv.key] = quant::parse_lowbit_scheme(kv.value);
    }
  } catch (const std::invalid_argument& e) {
    throw ConfigError(fmt::format(
        "--layer-precision for precision '{}' takes layer=format pairs (a layer name such as "
        "fc1 or conv2, or first/last; formats int8, int4, int2, ternary, binary, binary-act): {}",
        name, e.what()));
  }
  return std::make_unique<LowBitQatRecipe>(name, std::move(cfg), qat_epochs(opt));
}

}  // namespace mixp::train::detail
