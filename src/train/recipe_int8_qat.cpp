// The int8-qat recipe: fp32 training of a model with fake quantization (quant/qat.h), batch norm
// and observers frozen at configurable epochs, and at the end a real int8 model
// (quant/int8_model.h) whose test accuracy is the one reported. docs/quantization.md.
#include <fmt/format.h>

#include "mixp/quant/int8_model.h"
#include "mixp/quant/qat.h"
#include "mixp/train/checkpoint.h"
#include "mixp/train/recipe.h"
#include "mixp/train/train_config.h"
#include "train/recipe_factories.h"
#include "util/key_value.h"

namespace mixp::train::detail {

namespace {

class Int8QatRecipe final : public PrecisionRecipe {
 public:
  Int8QatRecipe(int64_t freeze_bn_epoch, int64_t disable_observer_epoch)
      : freeze_bn_epoch_(freeze_bn_epoch), disable_observer_epoch_(disable_observer_epoch) {}
  std::string name() const override { return "int8-qat"; }
  DType param_dtype() const override { return DType::fp32; }

  void prepare_model(nn::Module& model) const override {
    PrecisionRecipe::prepare_model(model);
    try {
      quant::prepare_qat(model, quant::default_qat_qconfig());
    } catch (const std::invalid_argument& e) {
      throw ConfigError(fmt::format(
          "precision 'int8-qat' quantizes models built of Linear/Conv2d/BatchNorm2d/ReLU/MaxPool2d "
          "layers (mlp, cnn): {}",
          e.what()));
    }
  }

  void before_step(nn::Module& model, int64_t epoch) override {
    quant::set_observers_enabled(model, epoch < disable_observer_epoch_);
    quant::freeze_batch_norm(model, epoch >= freeze_bn_epoch_);
  }

  std::shared_ptr<nn::Module> inference_model(nn::Module& trained) const override {
    // Training is over: the quantization parameters are final, and evaluating the fake-quant
    // model must not move them (observers also run in eval mode, as in PyTorch).
    quant::set_observers_enabled(trained, false);
    return quant::convert_to_int8(trained);
  }
  std::string trained_model_label() const override { return "fake_quant"; }

  void save_extra(nn::Module& model, const std::filesystem::path& dir) const override {
    if (!quant::observers_calibrated(model)) return;  // nothing observed yet (no step done)
    quant::save_int8_model(*quant::convert_to_int8(model), dir / kInt8ModelFile);
  }

  std::map<std::string, double> state() const override {
    return {{"freeze_bn_epoch", double(freeze_bn_epoch_)},
            {"disable_observer_epoch", double(disable_observer_epoch_)}};
  }

 private:
  int64_t freeze_bn_epoch_;
  int64_t disable_observer_epoch_;
};

}  // namespace

std::unique_ptr<PrecisionRecipe> make_int8_qat_recipe(std::string_view spec,
                                                      const RecipeOptions& opt) {
  if (::mixp::detail::split_spec(spec).has_colon) {
    throw ConfigError(
        "precision 'int8-qat' takes no policy keys (it trains in fp32 with fake "
        "quantization); its options are --qat-freeze-bn-epoch and "
        "--qat-disable-observer-epoch");
  }
  // fp32 training with fake quantization: nothing to override per layer and no loss scale.
  if (!opt.layer_precision.empty()) {
    throw ConfigError(
        "--layer-precision does not apply to precision 'int8-qat' (fp32 training with fake "
        "quantization of every Linear/Conv2d layer)");
  }
  if (opt.loss_scale_init || opt.growth_interval) {
    throw ConfigError(
        std::string(opt.loss_scale_init ? "--loss-scale-init" : "--growth-interval") +
        " only applies to dynamic loss scaling (recipes fp16, fp16-o2, fp16-pure); precision "
        "'int8-qat' does not scale the loss");
  }
  const int64_t bn = opt.qat_freeze_bn_epoch.value_or(kDefaultQatFreezeBnEpoch);
  const int64_t obs = opt.qat_disable_observer_epoch.value_or(kDefaultQatDisableObserverEpoch);
  if (bn < 0) {
    throw ConfigError(
        fmt::format("--qat-freeze-bn-epoch is a 0-based epoch and must be >= 0, got {}", bn));
  }
  if (obs < 1) {
    throw ConfigError(fmt::format(
        "--qat-disable-observer-epoch must be >= 1 (a 0-based epoch; the observers need at least "
        "the first epoch to choose the quantization parameters), got {}",
        obs));
  }
  return std::make_unique<Int8QatRecipe>(bn, obs);
}

}  // namespace mixp::train::detail
