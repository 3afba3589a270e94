// What the QAT recipes share (recipe_int8_qat.cpp, recipe_lowbit_qat.cpp): fp32 training of a
// model with fake quantization, batch norm frozen and the observers switched off at chosen epochs
// (--qat-freeze-bn-epoch, --qat-disable-observer-epoch), the converted model evaluated at the end
// and saved beside the checkpoint. docs/quantization.md.
#pragma once
#include <fmt/format.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "mixp/quant/qat.h"
#include "mixp/train/recipe.h"
#include "mixp/train/train_config.h"
#include "train/recipe_factories.h"

namespace mixp::train::detail {

// The two QAT epochs, checked: a clear ConfigError for values out of range.
struct QatEpochs {
  int64_t freeze_bn;
  int64_t disable_observer;
};
inline QatEpochs qat_epochs(const RecipeOptions& opt) {
  const QatEpochs e{opt.qat_freeze_bn_epoch.value_or(kDefaultQatFreezeBnEpoch),
                    opt.qat_disable_observer_epoch.value_or(kDefaultQatDisableObserverEpoch)};
  if (e.freeze_bn < 0) {
    throw ConfigError(fmt::format(
        "--qat-freeze-bn-epoch is a 0-based epoch and must be >= 0, got {}", e.freeze_bn));
  }
  if (e.disable_observer < 1) {
    throw ConfigError(fmt::format(
        "--qat-disable-observer-epoch must be >= 1 (a 0-based epoch; the observers need at least "
        "the first epoch to choose the quantization parameters), got {}",
        e.disable_observer));
  }
  return e;
}

// QAT recipes do not scale the loss: a loss-scaling flag is an error naming the recipe.
inline void refuse_loss_scaling(const RecipeOptions& opt, std::string_view name) {
  if (opt.loss_scale_init || opt.growth_interval) {
    throw ConfigError(fmt::format(
        "{} only applies to dynamic loss scaling (recipes fp16, fp16-o2, fp16-pure); precision "
        "'{}' does not scale the loss",
        opt.loss_scale_init ? "--loss-scale-init" : "--growth-interval", name));
  }
}

// A QAT recipe: the subclass says how to prepare, observe, convert and save.
class QatRecipe : public PrecisionRecipe {
 public:
  QatRecipe(std::string name, QatEpochs epochs) : name_(std::move(name)), epochs_(epochs) {}
  std::string name() const override { return name_; }
  DType param_dtype() const override { return DType::fp32; }

  void before_step(nn::Module& model, int64_t epoch) override {
    set_observers_enabled(model, epoch < epochs_.disable_observer);
    quant::freeze_batch_norm(model, epoch >= epochs_.freeze_bn);
  }
  std::shared_ptr<nn::Module> inference_model(nn::Module& trained) const override {
    // Training is over: the quantization parameters are final, and evaluating the fake-quant
    // model must not move them (observers also run in eval mode, as in PyTorch).
    set_observers_enabled(trained, false);
    return convert(trained);
  }
  std::string trained_model_label() const override { return "fake_quant"; }
  std::map<std::string, double> state() const override {
    return {{"freeze_bn_epoch", double(epochs_.freeze_bn)},
            {"disable_observer_epoch", double(epochs_.disable_observer)}};
  }

 protected:
  // The model's fake-quant observers on or off.
  virtual void set_observers_enabled(nn::Module& model, bool on) const = 0;
  // The real quantized model of the trained one.
  virtual std::shared_ptr<nn::Module> convert(nn::Module& trained) const = 0;
  // The built-in models the registry says this recipe does not train (the gpt family, by their
  // module kind): refused by prepare_model too, so that it agrees with
  // RecipeTraits::supports_model (build_run refuses them first, by the configured model name).
  void refuse_unsupported_builtin(const nn::Module& model) const {
    if (!recipe_supports_model(name_, model.kind())) {
      throw unsupported_model(
          fmt::format("{} is not one (docs/quantization.md)", model.kind()));
    }
  }
  // prepare_model's message when the model has layers the recipe cannot quantize.
  ConfigError unsupported_model(const std::string& why) const {
    return ConfigError(fmt::format(
        "precision '{}' quantizes models built of Linear/Conv2d/BatchNorm2d/ReLU/MaxPool2d "
        "layers (mlp, cnn): {}",
        name_, why));
  }

 private:
  std::string name_;
  QatEpochs epochs_;
};

}  // namespace mixp::train::detail
