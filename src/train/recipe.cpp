#include "mixp/train/recipe.h"

#include <fmt/format.h>

#include <algorithm>

#include "mixp/amp/autocast.h"
#include "mixp/nn/module.h"
#include "mixp/nn/serialize.h"
#include "mixp/ops/matmul_precision.h"
#include "mixp/tensor/generator.h"
#include "mixp/train/recipe_registry.h"
#include "mixp/train/train_config.h"
#include "train/recipe_factories.h"

namespace mixp::train {

namespace {

struct AutocastScope final : ForwardScope {
  AutocastScope(const amp::PrecisionPolicy& p, bool weight_shadows)
      : ac(amp::AutocastOptions{.dtype = p.compute,
                                .enabled = true,
                                .cache_enabled = true,
                                .low_precision_norm_saves = p.norm_saves_low,
                                .weight_shadows = weight_shadows}) {}
  amp::Autocast ac;
};

struct Tf32Scope final : ForwardScope {
  Tf32Scope() : tf32(true) {}
  Tf32Guard tf32;
};

}  // namespace

bool PrecisionRecipe::step(optim::Optimizer& opt) {
  opt.step();
  return true;
}

RecipeDtypes PrecisionRecipe::dtypes() const {
  const DType d = param_dtype();
  return {d, d, d, d, d, d};
}

void PrecisionRecipe::prepare_model(nn::Module& model) const {
  nn::convert_module(model, param_dtype());
}

PolicyRecipe::PolicyRecipe(amp::PrecisionPolicy policy, std::vector<amp::LayerRule> rules,
                           const RecipeOptions& opt)
    : policy_(std::move(policy)),
      rules_(std::move(rules)),
      seed_(opt.seed),
      weight_shadows_(opt.weight_shadows) {
  if (!rules_.empty() && policy_.params == DType::fp64) {
    throw ConfigError(
        "--layer-precision needs a recipe below fp64: fp64 is the reference and runs every layer "
        "in fp64");
  }
  // An fp16 layer in a recipe that does not scale the loss gets dynamic scaling, unless the
  // policy string said loss_scale explicitly.
  if (policy_.loss_scaling == amp::LossScaling::none &&
      policy_.name.find("loss_scale=") == std::string::npos &&
      amp::needs_fp16_loss_scaling(policy_, rules_)) {
    policy_.loss_scaling = amp::LossScaling::dynamic;
  }
  const bool dynamic = policy_.loss_scaling == amp::LossScaling::dynamic;
  auto refuse = [&](const char* flag) {
    throw ConfigError(fmt::format(
        "{} only applies to dynamic loss scaling (recipes fp16, fp16-o2, fp16-pure, or a policy "
        "with loss_scale=dynamic); precision '{}' {}",
        flag, policy_.name,
        policy_.loss_scaling == amp::LossScaling::fixed
            ? "uses a fixed loss scale"
            : "does not scale the loss (only fp16 needs it: bf16 has fp32's exponent range)"));
  };
  if (opt.loss_scale_init && !dynamic) refuse("--loss-scale-init");
  if (opt.growth_interval && !dynamic) refuse("--growth-interval");
  if (opt.min_loss_scale && !dynamic) refuse("--min-loss-scale");
  if (opt.max_loss_scale && !dynamic) refuse("--max-loss-scale");
  if (opt.loss_scale_init) policy_.loss_scale = *opt.loss_scale_init;
  if (opt.growth_interval) policy_.growth_interval = *opt.growth_interval;
  if (policy_.loss_scaling == amp::LossScaling::none) return;

  amp::GradScalerOptions so;
  so.init_scale = policy_.loss_scale;
  so.growth_interval = policy_.growth_interval;
  so.allow_fp16_params = !policy_.master_weights;  // pure fp16: fp32 leaf gradients, no master
  if (dynamic) {
    so.min_scale = opt.min_loss_scale.value_or(policy_.loss_scale_min);
    so.max_scale = opt.max_loss_scale.value_or(policy_.loss_scale_max);
    so.collapse_after = opt.collapse_after.value_or(policy_.collapse_after);
    if (so.min_scale <= 0) so.collapse_after = 0;
    if (so.max_scale > 0 && so.init_scale > so.max_scale) {
      throw ConfigError(fmt::format("the initial loss scale {:g} is above the maximum {:g}",
                                    so.init_scale, so.max_scale));
    }
    if (so.init_scale < so.min_scale) {
      throw ConfigError(fmt::format("the initial loss scale {:g} is below the minimum {:g}",
                                    so.init_scale, so.min_scale));
    }
  }
  try {
    scaler_ = std::make_unique<amp::GradScaler>(so);
  } catch (const std::invalid_argument& e) {
    std::string m = e.what();
    if (m.rfind("mixp::amp::GradScaler: ", 0) == 0) m = "loss scaling: " + m.substr(23);
    throw ConfigError(m);
  }
}

PolicyRecipe::~PolicyRecipe() = default;

std::string PolicyRecipe::describe() const {
  std::string s = policy_.name + ": " + policy_.describe();
  if (!rules_.empty()) {
    s += "; layers";
    for (size_t i = 0; i < rules_.size(); ++i)
      s += fmt::format("{} {}={}", i ? "," : "", rules_[i].key, mixp::name(rules_[i].dtype));
  }
  return s;
}

RecipeDtypes detail::policy_dtypes(const amp::PrecisionPolicy& p) {
  const bool narrow = p.params == DType::bf16 || p.params == DType::fp16;
  RecipeDtypes d;
  d.params = p.params;
  d.master = narrow && p.master_weights ? DType::fp32 : p.params;
  d.compute = p.compute;
  d.grads = d.master;
  d.states = p.params == DType::fp64 ? DType::fp64 : p.states;  // optim keeps fp64's in fp64
  d.activations = p.compute == DType::tf32 ? DType::fp32 : p.compute;
  return d;
}

RecipeDtypes PolicyRecipe::dtypes() const {
  return detail::policy_dtypes(policy_);
}

void PolicyRecipe::prepare_model(nn::Module& model) const {
  try {
    amp::apply_policy(model, policy_, rules_);
  } catch (const amp::PolicyError& e) {
    throw ConfigError(e.what());
  }
}

optim::PrecisionOptions PolicyRecipe::optimizer_precision() const {
  optim::PrecisionOptions o;
  o.master_weights = policy_.master_weights;
  o.write_back = policy_.rounding;
  o.overflow = Overflow::ieee;
  o.kahan = policy_.kahan;
  o.state_dtype = policy_.params == DType::fp64 ? DType::fp32 : policy_.states;
  // The write-back stream: a function of the run's seed, apart from the model's init stream.
  o.seed = Generator::splitmix64(seed_ ^ 0x5752495445424143ULL);  // "WRITEBAC"
  return o;
}

std::unique_ptr<ForwardScope> PolicyRecipe::forward_scope() const {
  if (policy_.autocast) return std::make_unique<AutocastScope>(policy_, weight_shadows_);
  if (policy_.compute == DType::tf32) return std::make_unique<Tf32Scope>();
  return nullptr;
}

Tensor PolicyRecipe::scale_loss(const Tensor& loss) const {
  return scaler_ ? scaler_->scale(loss) : loss;
}

bool PolicyRecipe::unscale_and_check(optim::Optimizer& opt) {
  if (!scaler_) return true;
  scaler_->unscale_(opt);
  return !scaler_->found_inf(opt);
}

bool PolicyRecipe::step(optim::Optimizer& opt) {
  if (!scaler_) return PrecisionRecipe::step(opt);
  return scaler_->step(opt);
}

void PolicyRecipe::update(bool skipped) {
  if (!scaler_) return;
  if (policy_.loss_scaling == amp::LossScaling::fixed) {
    scaler_->update(policy_.loss_scale);  // the scale stays; only the per-step state resets
    return;
  }
  scaler_->update();
}

double PolicyRecipe::loss_scale() const {
  return scaler_ ? scaler_->get_scale() : 1.0;
}

std::map<std::string, double> PolicyRecipe::state() const {
  std::map<std::string, double> m;
  if (scaler_) {
    for (const auto& [k, v] : scaler_->state_dict()) m[k] = v;
  }
  return m;
}

void PolicyRecipe::load_state(const std::map<std::string, double>& s) {
  if (!scaler_ || s.empty()) return;
  // The scale, growth tracker and skip counts are the checkpoint's; the hyper-parameters are this
  // recipe's (its policy and RecipeOptions, i.e. the resumed run's configuration: a
  // --growth-interval given on resume wins over the one the checkpoint ran with). PyTorch's
  // GradScaler.load_state_dict would restore them too; mixp's Trainer rebuilds them from the
  // configuration instead, so that state.json's config and the scaler cannot disagree.
  amp::GradScaler::StateDict sd(s.begin(), s.end());
  const amp::GradScalerOptions& mine = scaler_->options();
  for (auto& [k, v] : sd) {
    if (k == "growth_factor") v = mine.growth_factor;
    if (k == "backoff_factor") v = mine.backoff_factor;
    if (k == "growth_interval") v = static_cast<double>(mine.growth_interval);
    if (k == "min_scale") v = mine.min_scale;
    if (k == "max_scale") v = mine.max_scale;
  }
  try {
    scaler_->load_state_dict(sd);
  } catch (const std::invalid_argument& e) {
    throw TrainError(std::string("the checkpoint's loss-scale state: ") + e.what());
  }
}

const std::vector<std::string>& planned_recipes() {
  static const std::vector<std::string> names = recipe_names();
  return names;
}

std::vector<std::string> available_recipes() {
  return recipe_names();
}

bool recipe_supports_model(std::string_view name, std::string_view model) {
  const RecipeTraits* t = find_recipe(name);
  return !t || t->supports_model(model);
}

std::unique_ptr<PrecisionRecipe> make_recipe(std::string_view name, const RecipeOptions& opt) {
  const RecipeTraits& t = recipe_traits(name);
  if (t.family != RecipeFamily::int8_qat && t.family != RecipeFamily::lowbit_qat &&
      (opt.qat_freeze_bn_epoch || opt.qat_disable_observer_epoch)) {
    throw ConfigError(std::string(opt.qat_freeze_bn_epoch ? "--qat-freeze-bn-epoch"
                                                          : "--qat-disable-observer-epoch") +
                      " only applies to the QAT recipes (int8-qat, int4-qat, int2-qat, ternary, "
                      "binary, binary-act)");
  }
  return t.make(name, opt);
}

namespace detail {

std::unique_ptr<PrecisionRecipe> make_policy_recipe(std::string_view spec,
                                                    const RecipeOptions& opt) {
  amp::PrecisionPolicy policy;
  std::vector<amp::LayerRule> rules;
  try {
    policy = amp::parse_policy(spec);
    rules = amp::parse_layer_precision(opt.layer_precision);
  } catch (const amp::PolicyError& e) {
    throw ConfigError(e.what());
  }
  return std::make_unique<PolicyRecipe>(std::move(policy), std::move(rules), opt);
}

}  // namespace detail

}  // namespace mixp::train
