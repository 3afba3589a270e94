// The low-bit QAT recipes int4-qat, int2-qat, ternary, binary and binary-act: fp32 training of
// latent weights with low-bit fake quantization (quant/lowbit_qat.h), batch norm and observers
// frozen at the int8-qat epochs, and at the end a packed model (quant/lowbit_model.h) whose test
// accuracy is the one reported. docs/quantization.md, "Below 8 bits".
#include <fmt/format.h>

#include "mixp/quant/lowbit_model.h"
#include "mixp/quant/lowbit_qat.h"
#include "mixp/quant/qat.h"
#include "mixp/train/checkpoint.h"
#include "mixp/train/recipe.h"
#include "mixp/train/train_config.h"
#include "train/recipe_factories.h"
#include "util/key_value.h"

namespace mixp::train::detail {

namespace {

class LowBitQatRecipe final : public PrecisionRecipe {
 public:
  LowBitQatRecipe(std::string name, quant::LowBitConfig cfg, int64_t freeze_bn_epoch,
                  int64_t disable_observer_epoch)
      : name_(std::move(name)),
        cfg_(std::move(cfg)),
        freeze_bn_epoch_(freeze_bn_epoch),
        disable_observer_epoch_(disable_observer_epoch) {}
  std::string name() const override { return name_; }
  DType param_dtype() const override { return DType::fp32; }

  void prepare_model(nn::Module& model) const override {
    PrecisionRecipe::prepare_model(model);
    try {
      quant::prepare_lowbit_qat(model, cfg_);
    } catch (const std::invalid_argument& e) {
      throw ConfigError(fmt::format(
          "precision '{}' quantizes models built of Linear/Conv2d/BatchNorm2d/ReLU/MaxPool2d "
          "layers (mlp, cnn): {}",
          name_, e.what()));
    }
  }

  void before_step(nn::Module& model, int64_t epoch) override {
    quant::set_lowbit_observers_enabled(model, epoch < disable_observer_epoch_);
    quant::freeze_batch_norm(model, epoch >= freeze_bn_epoch_);
  }

  std::shared_ptr<nn::Module> inference_model(nn::Module& trained) const override {
    // The quantization parameters are final; evaluating must not move them.
    quant::set_lowbit_observers_enabled(trained, false);
    return quant::convert_to_packed(trained);
  }
  std::string trained_model_label() const override { return "fake_quant"; }

  void save_extra(nn::Module& model, const std::filesystem::path& dir) const override {
    if (!quant::lowbit_observers_calibrated(model)) return;  // no step done yet
    quant::save_packed_model(*quant::convert_to_packed(model), dir / kPackedModelFile);
  }

  std::map<std::string, double> state() const override {
    return {{"freeze_bn_epoch", double(freeze_bn_epoch_)},
            {"disable_observer_epoch", double(disable_observer_epoch_)}};
  }

 private:
  std::string name_;
  quant::LowBitConfig cfg_;
  int64_t freeze_bn_epoch_;
  int64_t disable_observer_epoch_;
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
  if (opt.loss_scale_init || opt.growth_interval) {
    throw ConfigError(
        std::string(opt.loss_scale_init ? "--loss-scale-init" : "--growth-interval") +
        " only applies to dynamic loss scaling (recipes fp16, fp16-o2, fp16-pure); precision '" +
        name + "' does not scale the loss");
  }
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
  const int64_t bn = opt.qat_freeze_bn_epoch.value_or(kDefaultQatFreezeBnEpoch);
  const int64_t obs = opt.qat_disable_observer_epoch.value_or(kDefaultQatDisableObserverEpoch);
  if (bn < 0) {
    throw ConfigError(
        fmt::format("--qat-freeze-bn-epoch is a 0-based epoch and must be >= 0, got {}", bn));
  }
  if (obs < 1) {
    throw ConfigError(fmt::format(
        "--qat-disable-observer-epoch must be >= 1 (the observers need at least the first epoch "
        "to choose the activation scales), got {}",
        obs));
  }
  return std::make_unique<LowBitQatRecipe>(name, std::move(cfg), bn, obs);
}

}  // namespace mixp::train::detail
