// The FP8 training recipes (see mixp/train/fp8_recipe.h).
#include "mixp/train/fp8_recipe.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>

#include "mixp/amp/fp8_linear.h"
#include "mixp/amp/layer_precision.h"
#include "mixp/amp/policy.h"
#include "mixp/nn/linear.h"
#include "mixp/nn/module.h"
#include "mixp/train/train_config.h"
#include "util/text.h"

namespace mixp::train {

namespace {

using ::mixp::detail::join;
using ::mixp::detail::lower;
using ::mixp::detail::trim;

// Splits "a=1, b = 2" into ordered (key, value) pairs; throws ConfigError for malformed entries.
std::vector<std::pair<std::string, std::string>> split_pairs(std::string_view list,
                                                             std::string_view what,
                                                             std::string_view example) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t end = list.find(',', pos);
    if (end == std::string_view::npos) end = list.size();
    const std::string item = trim(list.substr(pos, end - pos));
    pos = end + 1;
    if (item.empty()) {
      if (end == list.size()) break;
      throw ConfigError(fmt::format("{} '{}' has an empty entry between commas", what, list));
    }
    const size_t eq = item.find('=');
    if (eq == std::string::npos || trim(item.substr(0, eq)).empty()) {
      throw ConfigError(
          fmt::format("{} entry '{}' is not key=value (e.g. {})", what, item, example));
    }
    out.emplace_back(trim(item.substr(0, eq)), trim(item.substr(eq + 1)));
  }
  return out;
}

int64_t parse_int(const std::string& key, const std::string& v, int64_t lo, int64_t hi) {
  int64_t x = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || p != v.data() + v.size() || x < lo || x > hi) {
    throw ConfigError(fmt::format("fp8 option {}={}: expected an integer in [{}, {}]", key, v, lo, hi));
  }
  return x;
}

bool is_fp8_value(const std::string& v) {
  const std::string l = lower(v);
  return l == "fp8" || l == "fp8_e4m3" || l == "e4m3";
}

// Dotted-name depth: "" 0, "fc1" 1, "blocks.0.attn" 3.
int depth_of(const std::string& name) {
  return name.empty() ? 0 : 1 + static_cast<int>(std::count(name.begin(), name.end(), '.'));
}

bool covers(const std::string& outer, const std::string& inner) {
  return outer.empty() || inner == outer ||
         (inner.size() > outer.size() && inner.compare(0, outer.size(), outer) == 0 &&
          inner[outer.size()] == '.');
}

struct Fp8Scope final : ForwardScope {
  explicit Fp8Scope(std::unique_ptr<ForwardScope> b) : base(std::move(b)) {}
  std::unique_ptr<ForwardScope> base;  // bf16 Autocast; exits after the FP8 region below
  amp::Fp8Autocast fp8;
};

}  // namespace

const std::vector<std::string>& fp8_recipe_names() {
  static const std::vector<std::string> v{"fp8", "fp8-current", "mxfp8"};
  return v;
}

bool is_fp8_recipe(std::string_view spec) {
  const std::string s = trim(spec);
  const std::string base = lower(trim(s.substr(0, s.find(':'))));
  const auto& n = fp8_recipe_names();
  return std::find(n.begin(), n.end(), base) != n.end();
}

Fp8TrainingRecipe::Parsed Fp8TrainingRecipe::parse(std::string_view spec_in,
                                                    const RecipeOptions& opt) {
  const std::string spec = trim(spec_in);
  const size_t colon = spec.find(':');
  const std::string base = lower(trim(spec.substr(0, colon)));
  Parsed p;
  p.name = spec;
  if (base == "fp8") {
    p.fp8 = amp::Fp8Recipe::delayed();
  } else if (base == "fp8-current") {
    p.fp8 = amp::Fp8Recipe::current();
  } else if (base == "mxfp8") {
    p.fp8 = amp::Fp8Recipe::mxfp8();
  } else {
    throw ConfigError(fmt::format("'{}' is not an FP8 recipe; FP8 recipes: {}", spec,
                                  join(fp8_recipe_names())));
  }
  // FP8 keys configure the scaling; the others refine the bf16 policy the rest of the model
  // runs under.
  std::vector<std::string> rest;
  if (colon != std::string::npos) {
    for (const auto& [k0, v] : split_pairs(std::string_view(spec).substr(colon + 1),
                                           "precision", "'fp8:amax_history=16,margin=1'")) {
      const std::string k = lower(k0);
      auto only = [&](amp::Fp8Scaling s, const char* recipe) {
        if (p.fp8.scaling != s)
          throw ConfigError(fmt::format("fp8 option '{}' only applies to precision {}; {} {}", k,
                                        recipe, base,
                                        p.fp8.scaling == amp::Fp8Scaling::mxfp8
                                            ? "scales blocks of 32 by powers of two"
                                            : "keeps no amax history"));
      };
      if (k == "amax_history") {
        only(amp::Fp8Scaling::delayed, "fp8 (delayed scaling)");
        p.fp8.amax_history_len = parse_int(k, v, 1, 1 << 20);
      } else if (k == "amax_algo") {
        only(amp::Fp8Scaling::delayed, "fp8 (delayed scaling)");
        const std::string l = lower(v);
        if (l == "max") {
          p.fp8.amax_compute_algo = amp::AmaxComputeAlgo::max;
        } else if (l == "most_recent" || l == "most-recent") {
          p.fp8.amax_compute_algo = amp::AmaxComputeAlgo::most_recent;
        } else {
          throw ConfigError(fmt::format("fp8 option amax_algo takes max or most_recent, got '{}'", v));
        }
      } else if (k == "margin") {
        if (p.fp8.scaling == amp::Fp8Scaling::mxfp8)
          throw ConfigError("fp8 option 'margin' does not apply to mxfp8: its e8m0 block scales "
                            "follow the OCP MX rule");
        p.fp8.margin = static_cast<int>(parse_int(k, v, 0, 64));
      } else if (k == "format") {
        const std::string l = lower(v);
        if (l == "hybrid") {
          p.fp8.format = amp::Fp8Format::hybrid;
        } else if (l == "e4m3") {
          p.fp8.format = amp::Fp8Format::e4m3;
        } else {
          throw ConfigError(fmt::format(
              "fp8 option format takes hybrid (E4M3 forward, E5M2 gradients) or e4m3, got '{}' "
              "(pure E5M2 training is not supported, as in TransformerEngine)",
              v));
        }
      } else if (k == "block") {
        only(amp::Fp8Scaling::mxfp8, "mxfp8");
        p.fp8.mx_block = static_cast<int>(parse_int(k, v, 1, 1 << 16));
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
        "{} (in precision '{}'; its fp8 keys: amax_history, amax_algo, margin, format, block)",
        e.what(), spec));
  }
  p.base.name = spec;

  // --layer-precision: fp8 entries here, the rest to amp::parse_layer_precision.
  std::string others;
  for (const auto& [k, v] : split_pairs(opt.layer_precision, "--layer-precision",
                                        "embed=fp32,attn=bf16,head=fp8")) {
    if (is_fp8_value(v)) {
      p.all_rules.push_back({k, DType::fp8_e4m3});
      continue;
    }
    std::vector<amp::LayerRule> one;
    try {
      one = amp::parse_layer_precision(k + "=" + v);
    } catch (const amp::PolicyError& e) {
      const std::string l = lower(v);
      if (l.rfind("fp8", 0) == 0 || l.rfind("mxfp8", 0) == 0) {
        throw ConfigError(fmt::format(
            "--layer-precision {}={}: under an FP8 recipe a layer runs in fp8 (the recipe's "
            "scaling: {}), fp32, bf16 or fp16",
            k, v, p.fp8.describe()));
      }
      throw ConfigError(e.what());
    }
    p.rules.insert(p.rules.end(), one.begin(), one.end());
    p.all_rules.insert(p.all_rules.end(), one.begin(), one.end());
    others += (others.empty() ? "" : ",") + k + "=" + v;
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

Fp8TrainingRecipe::Fp8TrainingRecipe(std::string_view spec, const RecipeOptions& opt)
    : Fp8TrainingRecipe(parse(spec, opt), opt) {}

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

  // For each Linear, the rule that decides it: deepest covering module, then name over kind,
  // then the last given.
  struct Match {
    int depth = -1;
    bool by_name = false;
    int index = -1;
  };
  std::map<std::string, Match> decided;
  std::vector<std::pair<std::string, nn::Linear*>> linears;
  for (auto& [name, m] : model.named_modules()) {
    if (auto* lin = dynamic_cast<nn::Linear*>(m)) linears.emplace_back(name, lin);
  }
  for (size_t i = 0; i < all_rules_.size(); ++i) {
    const amp::LayerRule& rule = all_rules_[i];
    const std::vector<std::string> hit = amp::modules_matching(model, rule);
    const bool fp8_rule = rule.dtype == DType::fp8_e4m3;
    if (hit.empty() && fp8_rule) {
      std::vector<std::string> names;
      for (auto& [n, l] : linears) names.push_back(n);
      throw ConfigError(fmt::format(
          "--layer-precision {}=fp8: '{}' matches no module of this model (its Linear layers: "
          "{})",
          rule.key, rule.key, join(names)));
    }
    bool any_linear = false;
    for (const std::string& mod : hit) {
      for (auto& [lname, lin] : linears) {
        if (!covers(mod, lname)) continue;
        any_linear = true;
        const Match cand{depth_of(mod), mod == rule.key, static_cast<int>(i)};
        Match& cur = decided[lname];
        if (std::tie(cand.depth, cand.by_name, cand.index) >=
            std::tie(cur.depth, cur.by_name, cur.index))
          cur = cand;
      }
    }
    if (fp8_rule && !any_linear) {
      throw ConfigError(fmt::format(
          "--layer-precision {}=fp8: '{}' has no Linear layer; FP8 applies to Linear layers "
          "(as TransformerEngine's te.Linear), the rest of the model runs in bf16/fp32",
          rule.key, rule.key));
    }
  }
  fp8_layers_.clear();
  for (auto& [lname, lin] : linears) {
    auto it = decided.find(lname);
    const bool on = it == decided.end() ? lin->kind() == "linear"
                                        : all_rules_[it->second.index].dtype == DType::fp8_e4m3;
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
