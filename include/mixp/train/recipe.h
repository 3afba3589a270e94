// Precision recipes: the extension point through which the Trainer learns how a precision trains.
//
// A recipe (docs/architecture.md 3.6, amp) decides the dtype of the parameters, what runs under
// autocast, whether the loss is scaled, whether a step with non-finite gradients is skipped (fp16)
// or is an error (fp32: the NaN guard stops the run), how the optimizer keeps low-precision
// parameters (master weights, rounding, state dtype), and what of its state goes into a
// checkpoint. The Trainer calls the hooks below in this order for every optimizer step:
//
//   for each micro-batch:  { auto scope = forward_scope(); loss = model(x) ... }
//                          scale_loss(loss / grad_accum).backward()
//   ok = unscale_and_check(opt)          // false: inf/NaN gradients (skip if skips_nonfinite())
//   clip; stepped = step(opt)            // the optimizer step, or not (GradScaler::step)
//   update(!stepped)                     // e.g. grow or back off the loss scale
//
// Every recipe name has one entry in train/recipe_registry.h (its traits and factory): the presets
// and policy strings of mixp/amp/policy.h (fp64 fp32 tf32 bf16 bf16-pure fp16 fp16-o2 fp16-pure
// auto, refined by "bf16:params=fp32,compute=bf16,output=fp32") plus per-layer rules
// (mixp/amp/layer_precision.h), the FP8 recipes (train/fp8_recipe.h) and int8-qat;
// docs/amp-training.md is the user's guide.
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

#include "mixp/amp/grad_scaler.h"
#include "mixp/amp/layer_precision.h"
#include "mixp/amp/policy.h"
#include "mixp/format/dtype.h"
#include "mixp/optim/optimizer.h"
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
  std::string layer_precision;             // per-layer overrides (any recipe but fp64)
  std::optional<double> loss_scale_init;   // dynamic loss scaling (fp16 recipes)
  std::optional<int64_t> growth_interval;  // dynamic loss scaling (fp16 recipes)
  // The GradScaler's floor, cap and collapse detection (GradScalerOptions), overriding the
  // policy's (loss_scale_min/loss_scale_max/collapse_after keys; defaults: min 1 as DeepSpeed
  // and jmp, no cap beyond fp32's range as PyTorch, an error after 20 consecutive skipped steps
  // at the minimum).
  std::optional<double> min_loss_scale;
  std::optional<double> max_loss_scale;
  std::optional<int64_t> collapse_after;
  uint64_t seed = 0;  // stochastic rounding streams of the optimizer write-back
  // Autocast's weight shadows (docs/amp.md): off, each forward region (and each checkpointed
  // segment's recomputation) casts the weights it uses, and no low-precision copy outlives it.
  // The runs turn them off under gradient checkpointing (build_run.cpp), whose peak is the end
  // of backward; results are bit for bit the same.
  bool weight_shadows = true;
  // int8-qat: the 0-based epoch from which batch norm is frozen (running statistics) and from
  // which the observers stop updating (the quantization parameters are then fixed).
  std::optional<int64_t> qat_freeze_bn_epoch;
  std::optional<int64_t> qat_disable_observer_epoch;
};

// The format of each role of a training step, as a recipe trains (and as the energy estimate of
// study/step_counts.h prices it). Per-layer rules are not reflected: these are the recipe's own.
struct RecipeDtypes {
  DType params = DType::fp32;       // parameter storage (fp32 for the Autocast recipes)
  DType master = DType::fp32;       // the copy the optimizer updates: fp32 master weights, or
                                    // the parameters themselves without master weights
  DType compute = DType::fp32;      // GEMM inputs (tf32: fp32 rounded inside the GEMM; fp8_e4m3:
                                    // the FP8 recipes' Linear layers)
  DType grads = DType::fp32;        // the gradients the update applies, priced at the master's
                                    // format (mixp accumulates the gradients of leaves narrower
                                    // than fp32 in fp32, autograd/node.h)
  DType states = DType::fp32;       // optimizer states (Adam's m and v)
  DType activations = DType::fp32;  // the values between layers in the forward pass
  bool operator==(const RecipeDtypes&) const = default;
};

// Something held open for the duration of a forward pass (an autocast region).
struct ForwardScope {
  virtual ~ForwardScope() = default;
};

class PrecisionRecipe {
 public:
  virtual ~PrecisionRecipe() = default;
  // The canonical name: a preset ("bf16"; `auto` resolved) or "preset:key=value,...".
  virtual std::string name() const = 0;
  // The dtype parameters are stored in (fp32 for the Autocast recipes, whose masters they are).
  virtual DType param_dtype() const = 0;
  // One line for logs: what is stored, computed and scaled in what.
  virtual std::string describe() const { return name(); }
  // The format of each role (every role param_dtype() unless the recipe says otherwise).
  virtual RecipeDtypes dtypes() const;

  // Once, on the freshly built (or loaded) model, before the optimizer sees its parameters:
  // converts parameters and buffers, installs per-layer precision and the casts at the model's
  // boundary (forward wrappers: call the model through operator()).
  virtual void prepare_model(nn::Module& model) const;
  // How the optimizer keeps the parameters: master weights, write-back rounding, Kahan
  // compensation, state dtype.
  virtual optim::PrecisionOptions optimizer_precision() const { return {}; }
  // Held open around each forward pass and loss; null when the recipe needs none.
  virtual std::unique_ptr<ForwardScope> forward_scope() const { return nullptr; }
  // The tensor to call backward() on.
  virtual Tensor scale_loss(const Tensor& loss) const { return loss; }
  // Unscales the optimizer's gradients in place; returns false when a gradient is not finite.
  // Recipes without loss scaling return true and leave non-finite gradients to the Trainer's
  // NaN guard.
  virtual bool unscale_and_check(optim::Optimizer& /*opt*/) { return true; }
  // The optimizer step; returns false when the recipe skipped it (inf/NaN gradients).
  virtual bool step(optim::Optimizer& opt);
  // After each optimizer step (skipped or not).
  virtual void update(bool /*skipped*/) {}
  // The loss scale the next scale_loss multiplies by (1 without loss scaling), for the log.
  virtual double loss_scale() const { return 1.0; }
  // True when non-finite gradients skip the step instead of stopping the run.
  virtual bool skips_nonfinite() const { return false; }

  // Before each optimizer step, with the 0-based epoch its batches come from (int8-qat freezes
  // batch norm and the observers at their epochs here; a pure function of the epoch, so resuming
  // needs no extra state).
  virtual void before_step(nn::Module& /*model*/, int64_t /*epoch*/) {}
  // At the end of training: the model whose test accuracy is reported (int8-qat: the converted
  // int8 model), or null for the trained model itself. When not null, the trained model is
  // evaluated too and reported as "<trained_model_label()>_accuracy" / "_loss".
  virtual std::shared_ptr<nn::Module> inference_model(nn::Module& /*trained*/) const {
    return nullptr;
  }
  virtual std::string trained_model_label() const { return "trained"; }
  // Extra files of a checkpoint (int8-qat: the converted int8 model), written into the folder
  // being assembled.
  virtual void save_extra(nn::Module& /*model*/, const std::filesystem::path& /*dir*/) const {}

  // Checkpointed state (e.g. the loss scale and growth tracker); exact doubles. state() may also
  // record the recipe's hyper-parameters (growth interval, int8-qat's epochs) for the reader, but
  // load_state restores only what evolves during training: the hyper-parameters stay those this
  // recipe was built with, so that a resumed run's configuration (the checkpoint's, with the
  // options given on resume on top) is the one that runs.
  virtual std::map<std::string, double> state() const { return {}; }
  virtual void load_state(const std::map<std::string, double>& /*s*/) {}
};

// The recipe behind every name: a policy (amp/policy.h), per-layer rules (amp/layer_precision.h)
// and, when the policy scales the loss, a GradScaler (dynamic) or a fixed scale.
class PolicyRecipe : public PrecisionRecipe {
 public:
  // Throws ConfigError for rules or options that do not fit the policy (see make_recipe).
  PolicyRecipe(amp::PrecisionPolicy policy, std::vector<amp::LayerRule> rules,
               const RecipeOptions& opt = {});
  ~PolicyRecipe() override;

  std::string name() const override { return policy_.name; }
  DType param_dtype() const override { return policy_.params; }
  std::string describe() const override;
  RecipeDtypes dtypes() const override;
  void prepare_model(nn::Module& model) const override;
  optim::PrecisionOptions optimizer_precision() const override;
  std::unique_ptr<ForwardScope> forward_scope() const override;
  Tensor scale_loss(const Tensor& loss) const override;
  bool unscale_and_check(optim::Optimizer& opt) override;
  bool step(optim::Optimizer& opt) override;
  void update(bool skipped) override;
  double loss_scale() const override;
  bool skips_nonfinite() const override { return scaler_ != nullptr; }
  std::map<std::string, double> state() const override;
  void load_state(const std::map<std::string, double>& s) override;

  const amp::PrecisionPolicy& policy() const { return policy_; }
  const std::vector<amp::LayerRule>& layer_rules() const { return rules_; }
  // The scaler (dynamic or fixed loss scaling), or null.
  const amp::GradScaler* scaler() const { return scaler_.get(); }

 private:
  amp::PrecisionPolicy policy_;
  std::vector<amp::LayerRule> rules_;
  uint64_t seed_ = 0;
  bool weight_shadows_ = true;
  std::unique_ptr<amp::GradScaler> scaler_;
};

// A recipe by name or policy string: the entry of train/recipe_registry.h that the name (the part
// before a colon) selects builds it. Throws ConfigError (train_config.h) with the message of
// amp::PolicyError for an unknown recipe, key or value (naming the alternatives), for a
// --layer-precision that cannot be parsed, and for options the recipe cannot honour (loss-scale
// options given to a recipe that does not scale the loss, QAT options to another recipe).
std::unique_ptr<PrecisionRecipe> make_recipe(std::string_view name, const RecipeOptions& opt = {});

// Every recipe name, in the registry's order (docs/architecture.md 3.6; `auto` included).
std::vector<std::string> available_recipes();
// The same list: every recipe of docs/architecture.md 3.6 is available (kept for callers that
// told the two apart).
const std::vector<std::string>& planned_recipes();

// Whether recipe `name` (options after a colon ignored) can train the built-in model `model`:
// the registry's RecipeTraits::supports_model (no int8-qat for the gpt). Unknown recipes and
// models are accepted (make_recipe and the model factory report them).
bool recipe_supports_model(std::string_view name, std::string_view model);


}  // namespace mixp::train
