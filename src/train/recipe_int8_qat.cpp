// The int8-qat recipe: fp32 training of a model with fake quantization (quant/qat.h), batch norm
// and observers frozen at configurable epochs, and at the end a real int8 model
// (quant/int8_model.h) whose test accuracy is the one reported. docs/quantization.md.
#include <fmt/format.h>

#include "mixp/quant/int8_model.h"
#include "mixp/quant/qat.h"
#include "mixp/train/checkpoint.h"
#include "train/recipe_qat.h"
#include "util/key_value.h"

namespace mixp::train::detail {

namespace {

class Int8QatRecipe final : public QatRecipe {
 public:
  explicit Int8QatRecipe(QatEpochs epochs) : QatRecipe("int8-qat", epochs) {}

  void prepare_model(nn::Module& model) const override {
    refuse_unsupported_builtin(model);
    PrecisionRecipe::prepare_model(model);
    try {
      quant::prepare_qat(model, quant::default_qat_qconfig());
    } catch (const std::invalid_argument& e) {
      throw unsupported_model(e.what());
    }
  }

  void save_extra(nn::Module& model, const std::filesystem::path& dir) const override {
    if (!quant::observers_calibrated(model)) return;  // nothing observed yet (no step done)
    if (!quant::is_int8_convertible(model)) return;    // a custom model: fake quantization only
    quant::save_int8_model(*quant::convert_to_int8(model), dir / kInt8ModelFile);
  }

 protected:
  void set_observers_enabled(nn::Module& model, bool on) const override {
    quant::set_observers_enabled(model, on);
  }
  std::shared_ptr<nn::Module> convert(nn::Module& trained) const override {
    // A model prepared layer by layer (quant/qat.h: any Module tree) is evaluated as trained,
    // with fake quantization (nullptr: no separate inference model).
    if (!quant::is_int8_convertible(trained)) return nullptr;
    return quant::convert_to_int8(trained);
  }
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
  refuse_loss_scaling(opt, "int8-qat");
  return std::make_unique<Int8QatRecipe>(qat_epochs(opt));
}

}  // namespace mixp::train::detail
