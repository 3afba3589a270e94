// Precision recipes: the extension point through which the Trainer learns how a precision trains.
//
// A recipe (DESIGN.md section 3, amp) decides the dtype of the parameters, what runs under
// autocast, whether the loss is scaled, whether a step with non-finite gradients is skipped (fp16)
// or is an error (fp32: the NaN guard stops the run), and what of its state goes into a
// checkpoint. The Trainer calls the hooks below in this order for every optimizer step:
//
//   for each micro-batch:  { auto scope = forward_scope(); loss = model(x) ... }
//                          scale_loss(loss / grad_accum).backward()
//   ok = unscale_and_check(params)       // false: skip this step (only if skips_nonfinite())
//   clip, optimizer step (unless skipped)
//   update(skipped)                      // e.g. grow or back off the loss scale
//
// Today fp32 (everything in fp32, PyTorch AMP's O0) and fp64 (parameters and compute in fp64, the
// reference against which the others are judged) are available. The mixed-precision recipes
// (tf32, bf16, fp16 with dynamic loss scaling, fp8, int8-qat, ...) subclass PrecisionRecipe and
// register themselves in make_recipe.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mixp/format/dtype.h"
#include "mixp/tensor/tensor.h"

namespace mixp::nn {
class Module;
}

namespace mixp::train {

// int8-qat's defaults: batch norm frozen and observers off from the second epoch (epoch 1) on,
// after PyTorch's QAT tutorial (which freezes them part-way through training). A run of one epoch
// (or fewer steps) never freezes them.
inline constexpr int64_t kDefaultQatFreezeBnEpoch = 1;
inline constexpr int64_t kDefaultQatDisableObserverEpoch = 1;

// Options that only some recipes use; make_recipe rejects those the recipe cannot honour.
struct RecipeOptions {
  std::string layer_precision;             // per-layer overrides (mixed recipes)
  std::optional<double> loss_scale_init;   // dynamic loss scaling (fp16 recipes)
  std::optional<int64_t> growth_interval;  // dynamic loss scaling (fp16 recipes)
  // int8-qat: the 0-based epoch from which batch norm is frozen (running statistics) and from
  // which the observers stop updating (the quantization parameters are then fixed).
  std::optional<int64_t> qat_freeze_bn_epoch;
  std::optional<int64_t> qat_disable_observer_epoch;
};

// Something held open for the duration of a forward pass (an autocast region).
struct ForwardScope {
  virtual ~ForwardScope() = default;
};

class PrecisionRecipe {
 public:
  virtual ~PrecisionRecipe() = default;
  virtual std::string name() const = 0;
  // The dtype parameters are stored in (fp32 master weights for mixed recipes).
  virtual DType param_dtype() const = 0;

  // Once, on the freshly built (or loaded) model, before the optimizer sees its parameters:
  // converts parameters and buffers to param_dtype().
  virtual void prepare_model(nn::Module& model) const;
  // Held open around each forward pass and loss; null when the recipe needs none.
  virtual std::unique_ptr<ForwardScope> forward_scope() const { return nullptr; }
  // The tensor to call backward() on.
  virtual Tensor scale_loss(const Tensor& loss) const { return loss; }
  // Unscales the gradients in place; returns false when a gradient is not finite and the step
  // must be skipped. Recipes without loss scaling return true and leave non-finite gradients to
  // the Trainer's NaN guard.
  virtual bool unscale_and_check(std::span<Tensor> params) { return true; }
  // After each optimizer step (skipped or not).
  virtual void update(bool skipped) {}
  // The current loss scale (1 without loss scaling), for the log.
  virtual double loss_scale() const { return 1.0; }
  // True when non-finite gradients skip the step instead of stopping the run.
  virtual bool skips_nonfinite() const { return false; }

  // Before each optimizer step, with the 0-based epoch its batches come from (int8-qat freezes
  // batch norm and the observers at their epochs here; a pure function of the epoch, so resuming
  // needs no extra state).
  virtual void before_step(nn::Module& model, int64_t epoch) {}
  // At the end of training: the model whose test accuracy is reported (int8-qat: the converted
  // int8 model), or null for the trained model itself. When not null, the trained model is
  // evaluated too and reported as "<trained_model_label()>_accuracy" / "_loss".
  virtual std::shared_ptr<nn::Module> inference_model(nn::Module& trained) const { return nullptr; }
  virtual std::string trained_model_label() const { return "trained"; }
  // Extra files of a checkpoint (int8-qat: the converted int8 model), written into the folder
  // being assembled.
  virtual void save_extra(nn::Module& model, const std::filesystem::path& dir) const {}

  // Checkpointed state (e.g. the loss scale and growth tracker); exact doubles.
  virtual std::map<std::string, double> state() const { return {}; }
  virtual void load_state(const std::map<std::string, double>& s) {}
};

// A recipe by name. Throws ConfigError (train_config.h):
//   - "precision 'bf16' is not available yet; available: fp32, fp64" for a recipe of DESIGN.md's
//     list that this build does not implement yet;
//   - "unknown precision 'x'; available: fp32, fp64 (planned: ...)" for any other name;
//   - for options the recipe cannot use (--layer-precision needs a mixed-precision recipe; the
//     loss-scale options need an fp16 recipe).
std::unique_ptr<PrecisionRecipe> make_recipe(std::string_view name, const RecipeOptions& opt = {});

// Names make_recipe accepts, in DESIGN.md's order.
std::vector<std::string> available_recipes();
// Every recipe name of DESIGN.md section 3, available or not.
const std::vector<std::string>& planned_recipes();

// Converts every floating parameter and buffer of `model` to `dtype` in place (the tensors keep
// their identity, so references held elsewhere see the change). Nearest-even rounding.
void convert_module(nn::Module& model, DType dtype);

}  // namespace mixp::train
