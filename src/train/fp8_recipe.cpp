// The FP8 training recipes (see mixp/train/fp8_recipe.h).
#include "mixp/train/fp8_recipe.h"

#include <fmt/format.h>

#include <algorithm>

#include "mixp/amp/fp8_linear.h"
#include "mixp/amp/layer_precision.h"
#include "mixp/amp/policy.h"
#include "mixp/nn/linear.h"
#include "mixp/nn/module.h"
#include "mixp/train/recipe_registry.h"
#include "mixp/train/train_config.h"
#include "train/recipe_factories.h"
#include "util/key_value.h"
#include "util/text.h"

namespace mixp::train {

namespace {

using ::mixp::detail::join;
using ::mixp::detail::lower;
using ::mixp::detail::trim;

struct Fp8Scope final : ForwardScope {
  explicit Fp8Scope(std::unique_ptr<ForwardScope> b) : base(std::move(b)) {}
  std::unique_ptr<ForwardScope> base;  // bf16 Autocast; exits after the FP8 region below
  amp::Fp8Autocast fp8;
};

}  // namespace

const std::vector<std::string>& fp8_recipe_names() {
  static const std::vector<std::string> v = [] {
    std::vector<std::string> n;
    for (const RecipeTraits& t : recipe_registry())
      if (t.family == RecipeFamily::fp8) n.emplace_back(t.name);
    return n;
  }();
  return v;
}

bool is_fp8_recipe(std::string_view spec) {
  return is_recipe_family(spec, RecipeFamily::fp8);
}

namespace {

// The keys of the block-scaled recipes (docs/fp4.md, docs/fp8.md "fp8-block").
std::string block_keys(amp::Fp8Scaling s) {
  return s == amp::Fp8Scaling::fp8_block ? "pow2, promote" : s == amp::Fp8Scaling::nvfp4
                                                                 ? "rht, 2d, sr, bf16_last"
                                                                 : "rht, sr, bf16_last";
}

// Parses one of those keys into `r`; false for a key that is none of them.
bool parse_block_key(amp::Fp8Recipe& r, const std::string& base, const std::string& k,
                     const std::string& v) {
  constexpr std::string_view kOption = "precision option";
  const bool fp4 = r.scaling == amp::Fp8Scaling::nvfp4 || r.scaling == amp::Fp8Scaling::mxfp4;
  auto check = [&](bool applies) {
    if (!applies)
      throw ConfigError(fmt::format(
          "precision option '{}' does not apply to {} (its options: {})", k, base,
          amp::is_block_scaled(r.scaling) ? block_keys(r.scaling)
                                          : std::string("preset, amax_history, amax_algo, "
                                                        "margin, format, block")));
  };
  auto flag = [&](bool applies) {
    check(applies);
    return ::mixp::detail::parse_choice(kOption, k, v, {"0|off|false", "1|on|true"}) == 1;
  };
  if (k == "rht") {
    r.rht = flag(fp4);
  } else if (k == "sr") {
    r.sr = flag(fp4);
  } else if (k == "2d") {
    r.weight_2d = flag(r.scaling == amp::Fp8Scaling::nvfp4);
  } else if (k == "pow2") {
    r.pow2 = flag(r.scaling == amp::Fp8Scaling::fp8_block);
  } else if (k == "bf16_last") {
    check(fp4);
    r.bf16_last = static_cast<int>(::mixp::detail::parse_integer(kOption, k, v, 0, 1 << 16));
  } else if (k == "promote") {
    check(r.scaling == amp::Fp8Scaling::fp8_block);
    r.promote = static_cast<int>(::mixp::detail::parse_integer(kOption, k, v, 0, 1 << 20));
  } else {
    return false;
  }
  return true;
}

}  // namespace

Fp8TrainingRecipe::Parsed Fp8TrainingRecipe::parse(std::string_view spec_in,
                                                   const RecipeOptions& opt,
                                                   const amp::Fp8Recipe& scaling) {
  const std::string spec = trim(spec_in);
  const ::mixp::detail::SpecParts parts = ::mixp::detail::split_spec(spec);
  const std::string base = lower(parts.base);
  Parsed p;
  p.name = spec;
  p.fp8 = scaling;
  // FP8 keys configure the scaling; the others refine the bf16 policy the rest of the model
  // runs under.
  std::vector<std::string> rest;
  {
    constexpr std::string_view kOption = "fp8 option";
    const auto entries = ::mixp::detail::split_key_values(
        parts.options,
        {.list = "precision", .entry = "key=value", .example = "'fp8:amax_history=16,margin=1'"});
    // preset=te first, wherever it stands, so that the other keys refine it
    // ("fp8:margin=1,preset=te" is TE's recipe with margin 1).
    for (const auto& [k0, v] : entries) {
      if (lower(k0) != "preset") continue;
      if (p.fp8.scaling != amp::Fp8Scaling::delayed)
        throw ConfigError(fmt::format("fp8 option 'preset' only applies to precision fp8 (delayed "
                                      "scaling); {} keeps no amax history",
                                      base));
      p.fp8 = ::mixp::detail::parse_choice(
                  kOption, "preset", v, {"te", "mixp"},
                  " (te: TransformerEngine's DelayedScaling defaults, amax history 1024 with "
                  "max, margin 0; mixp: the default, amax history 16)") == 0
                  ? amp::Fp8Recipe::te_delayed()
                  : amp::Fp8Recipe::delayed();
    }
    for (const auto& [k0, v] : entries) {
      const std::string k = lower(k0);
      if (k == "preset") continue;
      auto only = [&](amp::Fp8Scaling s, const char* recipe) {
        if (p.fp8.scaling != s)
          throw ConfigError(fmt::format("fp8 option '{}' only applies to precision {}; {} {}", k,
                                        recipe, base,
                                        p.fp8.scaling == amp::Fp8Scaling::mxfp8
                                            ? "scales blocks of 32 by powers of two"
                                            : "keeps no amax history"));
      };
      if (amp::is_block_scaled(p.fp8.scaling) &&
          (k == "amax_history" || k == "amax_algo" || k == "margin" || k == "format" ||
           k == "block" || k == "preset"))
        throw ConfigError(fmt::format(
            "fp8 option '{}' does not apply to {}: its block scales come from each block's own "
            "amax and its formats are fixed; its options: {}",
            k, base, block_keys(p.fp8.scaling)));
      if (k == "amax_history") {
        only(amp::Fp8Scaling::delayed, "fp8 (delayed scaling)");
        p.fp8.amax_history_len = ::mixp::detail::parse_integer(kOption, k, v, 1, 1 << 20);
      } else if (k == "amax_algo") {
        only(amp::Fp8Scaling::delayed, "fp8 (delayed scaling)");
        p.fp8.amax_compute_algo =
            ::mixp::detail::parse_choice(kOption, k, v, {"max", "most_recent|most-recent"}) == 0
                ? amp::AmaxComputeAlgo::max
                : amp::AmaxComputeAlgo::most_recent;
      } else if (k == "margin") {
        if (p.fp8.scaling == amp::Fp8Scaling::mxfp8)
          throw ConfigError("fp8 option 'margin' does not apply to mxfp8: its e8m0 block scales "
                            "follow the OCP MX rule");
        p.fp8.margin = static_cast<int>(::mixp::detail::parse_integer(kOption, k, v, 0, 64));
      } else if (k == "format") {
        p.fp8.format = ::mixp::detail::parse_choice(
                           kOption, k, v, {"hybrid", "e4m3"},
                           " (hybrid: E4M3 forward, E5M2 gradients; pure E5M2 training is not "
                           "supported, as in TransformerEngine)") == 0
                           ? amp::Fp8Format::hybrid
                           : amp::Fp8Format::e4m3;
      } else if (k == "block") {
        only(amp::Fp8Scaling::mxfp8, "mxfp8");
        p.fp8.mx_block = static_cast<int>(::mixp::detail::parse_integer(kOption, k, v, 1, 1 << 16));
      } else if (parse_block_key(p.fp8, base, k, v)) {
      } else {
        rest.push_back(k0 + "=" + v);
      }
    }
  }
  std::string base_spec = "bf16";
  if (!rest.empty()) {
    base_spec += ":";
    for (size_t i = 0; i < rest.size(); ++i) base_spec += (i ? "," : "") + rest[i];
  }
  try {
    p.base = amp::parse_policy(base_spec);
  } catch (const amp::PolicyError& e) {
    throw ConfigError(fmt::format(
        "{} (in precision '{}'; its fp8 keys: preset, amax_history, amax_algo, margin, format, "
        "block)",
        e.what(), spec));
  }
  p.base.name = spec;

  // --layer-precision: fp8 rules put Linear layers in FP8 (prepare_model); the others go to the
  // bf16 policy as they would under the bf16 recipe.
  try {
    p.all_rules = amp::parse_layer_precision(opt.layer_precision, /*fp8_layers=*/true);
  } catch (const amp::PolicyError& e) {
    throw ConfigError(e.what());
  }
  for (const amp::LayerRule& r : p.all_rules)
    if (r.dtype != DType::fp8_e4m3) p.rules.push_back(r);
  // A rule naming another quantized recipe ("*=mxfp4" under nvfp4) is a mistake, not a mix.
  for (const auto& [key, v] : ::mixp::detail::split_key_values(opt.layer_precision, {})) {
    const std::string l = lower(v);
    if ((l == "mxfp8" || l == "fp8-block" || l == "nvfp4" || l == "mxfp4") && l != base)
      throw ConfigError(fmt::format(
          "--layer-precision {}={}: under --precision {} a layer runs in {} (NAME={} or "
          "NAME=fp8), fp32, bf16 or fp16; one run has one quantized recipe",
          key, v, base, base, base));
  }
  if (opt.loss_scale_init || opt.growth_interval || opt.min_loss_scale || opt.max_loss_scale) {
    const bool fp16 = amp::needs_fp16_loss_scaling(p.base, p.rules);
    if (!fp16) {
      throw ConfigError(fmt::format(
          "{} does not scale the loss: the FP8 gradients get their own per-tensor scale (E5M2 "
          "with delayed or current scaling, e8m0 blocks for mxfp8) and the rest runs in bf16 "
          "with fp32's exponent range; the loss-scale options do not apply",
          base));
    }
  }
  try {
    p.fp8.validate();
  } catch (const std::invalid_argument& e) {
    throw ConfigError(e.what());
  }
  return p;
}

Fp8TrainingRecipe::Fp8TrainingRecipe(std::string_view spec, const RecipeOptions& opt,
                                     const amp::Fp8Recipe& scaling)
    : Fp8TrainingRecipe(parse(spec, opt, scaling), opt) {}

RecipeDtypes Fp8TrainingRecipe::dtypes() const {
  RecipeDtypes d = PolicyRecipe::dtypes();
  // The Linear layers' GEMMs (E5M2 gradients cost the same); nvfp4 and mxfp4 multiply E2M1.
  d.compute = fp8_.scaling == amp::Fp8Scaling::nvfp4 || fp8_.scaling == amp::Fp8Scaling::mxfp4
                  ? DType::fp4_e2m1
                  : DType::fp8_e4m3;
  return d;
}

namespace detail {

std::unique_ptr<PrecisionRecipe> make_fp8_recipe(std::string_view spec, const RecipeOptions& opt,
                                                 const amp::Fp8Recipe& scaling) {
  try {
    return std::make_unique<Fp8TrainingRecipe>(spec, opt, scaling);
  } catch (const ::mixp::detail::KeyValueError& e) {
    throw ConfigError(e.what());
  }
}

}  // namespace detail

Fp8TrainingRecipe::Fp8TrainingRecipe(Parsed p, const RecipeOptions& opt)
    : PolicyRecipe(p.base, p.rules, opt),
      name_(std::move(p.name)),
      fp8_(p.fp8),
      all_rules_(std::move(p.all_rules)) {}

std::string Fp8TrainingRecipe::describe() const {
  const std::string where =
      fp8_layers_.empty() ? std::string("FP8 Linear layers")
                          : fmt::format("FP8 Linear layers {}", join(fp8_layers_));
  std::string s = fmt::format("{}: {} ({}); other layers: {}", name_, where, fp8_.describe(),
                              policy().describe());
  if (!all_rules_.empty()) {
    s += "; layers";
    for (size_t i = 0; i < all_rules_.size(); ++i) {
      const auto& r = all_rules_[i];
      s += fmt::format("{} {}={}", i ? "," : "", r.key,
                       r.dtype == DType::fp8_e4m3 ? "fp8" : std::string(mixp::name(r.dtype)));
    }
  }
  return s;
}

void Fp8TrainingRecipe::prepare_model(nn::Module& model) const {
  PolicyRecipe::prepare_model(model);  // parameters, bf16/fp32 rules, the output cast

  // For each Linear, the rule that decides it: amp::LayerRuleResolver's precedence, as for the
  // other rules.
  std::vector<std::pair<std::string, nn::Linear*>> linears;
  for (auto& [name, m] : model.named_modules()) {
    if (auto* lin = dynamic_cast<nn::Linear*>(m)) linears.emplace_back(name, lin);
  }
  const amp::LayerRuleResolver resolver(model, all_rules_);
  for (size_t i = 0; i < all_rules_.size(); ++i) {
    const amp::LayerRule& rule = all_rules_[i];
    if (rule.dtype != DType::fp8_e4m3) continue;  // PolicyRecipe::prepare_model checked these
    const std::vector<std::string>& hit = resolver.matches(i);
    if (hit.empty()) {
      std::vector<std::string> names;
      for (auto& [n, l] : linears) names.push_back(n);
      throw ConfigError(fmt::format(
          "--layer-precision {}=fp8: '{}' matches no module of this model (its Linear layers: "
          "{})",
          rule.key, rule.key, join(names)));
    }
    const bool any_linear = std::any_of(linears.begin(), linears.end(), [&](const auto& l) {
      return std::any_of(hit.begin(), hit.end(),
                         [&](const std::string& mod) { return amp::module_covers(mod, l.first); });
    });
    if (!any_linear) {
      throw ConfigError(fmt::format(
          "--layer-precision {}=fp8: '{}' has no Linear layer; FP8 applies to Linear layers "
          "(as TransformerEngine's te.Linear), the rest of the model runs in bf16/fp32",
          rule.key, rule.key));
    }
  }
  // bf16_last (nvfp4, mxfp4): the Linear layers of the last N blocks ("blocks.<i>." in their
  // names) stay in bf16 unless a rule other than `*` names them; a model without blocks keeps
  // its last N Linear layers.
  std::vector<bool> last(linears.size(), false);
  if (fp8_.bf16_last > 0) {
    auto block_of = [](const std::string& n) -> int {
      const size_t at = n.rfind("blocks.", 0) == 0 ? 0 : n.find(".blocks.");
      if (at == std::string::npos) return -1;
      const size_t d = at + (at == 0 ? 7 : 8);
      const size_t e = n.find('.', d);
      try {
        return std::stoi(n.substr(d, e - d));
      } catch (const std::exception&) {
        return -1;
      }
    };
    int top = -1;
    for (auto& [n, l] : linears) top = std::max(top, block_of(n));
    int counted = 0;
    for (size_t i = linears.size(); i-- > 0;) {
      const int b = block_of(linears[i].first);
      if (top >= 0) last[i] = b >= 0 && b > top - fp8_.bf16_last;
      else if (linears[i].second->kind() == "linear" && counted < fp8_.bf16_last) {
        last[i] = true;
        ++counted;
      }
    }
  }
  fp8_layers_.clear();
  for (size_t i = 0; i < linears.size(); ++i) {
    auto& [lname, lin] = linears[i];
    const std::optional<size_t> rule = resolver.rule_for(lname);
    const bool explicit_rule = rule && all_rules_[*rule].key != amp::kWholeModelKey;
    bool on = rule ? all_rules_[*rule].dtype == DType::fp8_e4m3 : lin->kind() == "linear";
    if (on && last[i] && !explicit_rule) on = false;
    if (!on) continue;
    if (!amp::fp8_meta(*lin)) amp::enable_fp8(*lin, fp8_);  // idempotent on a prepared model
    fp8_layers_.push_back(lname);
  }
  if (fp8_layers_.empty()) {
    throw ConfigError(fmt::format(
        "precision {}: no Linear layer of this model runs in FP8 (the head and layers given "
        "another precision by --layer-precision stay out); use bf16 instead, or put layers in "
        "fp8 with --layer-precision NAME=fp8",
        name_));
  }
}

std::unique_ptr<ForwardScope> Fp8TrainingRecipe::forward_scope() const {
  return std::make_unique<Fp8Scope>(PolicyRecipe::forward_scope());
}

void Fp8TrainingRecipe::update(bool skipped) {
  PolicyRecipe::update(skipped);
  // The backward of this step has ended: its grad_output scales are due (TE updates them at the
  // end of backward). Done here so that a checkpoint written after the step holds no pending
  // update.
  amp::fp8_update_backward_states();
}

}  // namespace mixp::train
