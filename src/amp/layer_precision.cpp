#include "mixp/amp/layer_precision.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "mixp/amp/autocast.h"
#include "mixp/autograd/grad_mode.h"
#include "mixp/nn/module.h"
#include "mixp/nn/serialize.h"
#include "mixp/ops/matmul_precision.h"
#include "util/key_value.h"
#include "util/text.h"

namespace mixp::amp {

namespace {

using ::mixp::detail::join;

bool narrow(DType d) {
  return d == DType::bf16 || d == DType::fp16;
}

// The kinds an alias stands for (a plain kind stands for itself).
std::vector<std::string> kinds_of(const std::string& key) {
  if (key == "embed") return {"embedding"};
  if (key == "attn") return {"attention"};
  if (key == "conv") return {"conv2d", "conv1d"};
  if (key == "ln") return {"layer_norm"};
  if (key == "bn") return {"batch_norm2d"};
  if (key == "norm") return {"layer_norm", "batch_norm2d"};
  return {key};
}

Tensor cast(const Tensor& x, DType d) {
  if (!x.defined() || !x.is_floating_point() || x.dtype() == d) return x;
  return x.to(d, Round::nearest_even);
}

struct Region {
  DType dtype;
  std::string_view mode;  // "mixed" | "pure" | "full"
  DType pure_dtype;       // the recipe's compute dtype (pure mode)
};

// The rule's part of a wrapper: run `m.forward(x)` as the region says.
Tensor run_region(const Region& r, nn::Module& m, const Tensor& x) {
  const bool floating = x.defined() && x.is_floating_point();
  if (r.mode == "pure") {
    const Tensor y = m.forward(cast(x, r.dtype));
    if (!y.defined() || !y.is_floating_point()) return y;
    return cast(y, floating ? x.dtype() : r.pure_dtype);
  }
  if (narrow(r.dtype)) {
    Autocast ac(r.dtype);
    return m.forward(x);
  }
  // fp32: autocast off, TF32 off, fp32 inputs.
  Autocast off(DType::bf16, /*enabled=*/false);
  Tf32Guard full(false);
  return m.forward(floating && x.dtype() != DType::fp64 ? cast(x, DType::fp32) : x);
}

}  // namespace

std::vector<LayerRule> parse_layer_precision(std::string_view spec, bool fp8_layers) {
  std::vector<LayerRule> rules;
  try {
    for (const auto& [key, v] :
         detail::split_key_values(spec, {.list = "--layer-precision",
                                        .entry = "layer=dtype",
                                        .example = "embed=fp32,attn=bf16,head=fp32"})) {
      const std::string l = detail::lower(v);
      // The block-scaled recipes' names mark their layers too (train/fp8_recipe.cpp checks that
      // the name is the recipe's own): "head=bf16,*=nvfp4".
      if (fp8_layers && (l == "fp8" || l == "fp8_e4m3" || l == "e4m3" || l == "mxfp8" ||
                         l == "fp8-block" || l == "nvfp4" || l == "mxfp4")) {
        rules.push_back({key, DType::fp8_e4m3});
        continue;
      }
      const std::optional<DType> d = parse_policy_dtype(v);
      if (d && (*d == DType::fp32 || narrow(*d))) {
        rules.push_back({key, *d});
        continue;
      }
      const bool fp8 = l.rfind("fp8", 0) == 0 || l.rfind("mxfp8", 0) == 0;
      if (fp8_layers) {
        throw PolicyError(fmt::format(
            "--layer-precision {}={}: under an FP8 recipe a layer runs in fp8 (the recipe's "
            "scaling), fp32, bf16 or fp16",
            key, v));
      }
      throw PolicyError(fmt::format(
          "--layer-precision {}={}: a layer can run in fp32, bf16 or fp16{}", key, v,
          fp8 || l == "nvfp4" || l == "mxfp4"
              ? " (fp8 layers need an FP8 recipe: --precision fp8, fp8-current, mxfp8, "
                "fp8-block, nvfp4 or mxfp4, which take NAME=fp8 or NAME=<the recipe>)"
              : ""));
    }
  } catch (const detail::KeyValueError& e) {
    throw PolicyError(e.what());
  }
  return rules;
}

std::vector<std::string> modules_matching(nn::Module& model, const LayerRule& rule) {
  std::vector<std::string> out;
  // `*` is the model itself: its rule covers every module no other rule decides ("the rest").
  if (rule.key == kWholeModelKey) return {std::string()};
  const std::vector<std::string> kinds = kinds_of(rule.key);
  for (auto& [name, m] : model.named_modules()) {
    const bool by_kind = std::find(kinds.begin(), kinds.end(), m->kind()) != kinds.end();
    if (by_kind || name == rule.key) out.push_back(name);
  }
  return out;
}

bool module_covers(std::string_view outer, std::string_view inner) {
  return outer.empty() || inner == outer ||
         (inner.size() > outer.size() && inner.substr(0, outer.size()) == outer &&
          inner[outer.size()] == '.');
}

LayerRuleResolver::LayerRuleResolver(nn::Module& model, std::span<const LayerRule> rules) {
  std::map<std::string, size_t> by_kind, by_name;  // the last rule of each sort per module
  for (size_t i = 0; i < rules.size(); ++i) {
    matches_.push_back(modules_matching(model, rules[i]));
    for (const std::string& n : matches_.back())
      (n == rules[i].key || rules[i].key == kWholeModelKey ? by_name : by_kind)[n] = i;
  }
  own_ = std::move(by_kind);
  for (const auto& [n, i] : by_name) own_[n] = i;
}

std::optional<size_t> LayerRuleResolver::own_rule(const std::string& module) const {
  const auto it = own_.find(module);
  if (it == own_.end()) return std::nullopt;
  return it->second;
}

std::optional<size_t> LayerRuleResolver::rule_for(const std::string& module) const {
  std::string n = module;
  while (true) {
    if (const auto r = own_rule(n)) return r;
    if (n.empty()) return std::nullopt;
    const size_t dot = n.rfind('.');
    n = dot == std::string::npos ? std::string() : n.substr(0, dot);
  }
}

bool needs_fp16_loss_scaling(const PrecisionPolicy& policy, const std::vector<LayerRule>& rules) {
  if (policy.uses_fp16()) return true;
  return std::any_of(rules.begin(), rules.end(),
                     [](const LayerRule& r) { return r.dtype == DType::fp16; });
}

void apply_policy(nn::Module& model, const PrecisionPolicy& policy,
                  const std::vector<LayerRule>& rules) {
  if (!rules.empty() && policy.params == DType::fp64) {
    throw PolicyError(
        "--layer-precision needs a recipe below fp64: fp64 is the reference and runs every layer "
        "in fp64");
  }
  auto modules = model.named_modules();
  const LayerRuleResolver resolver(model, rules);
  for (size_t i = 0; i < rules.size(); ++i) {
    if (!resolver.matches(i).empty()) continue;
    std::set<std::string> kinds;
    std::vector<std::string> names;
    for (auto& [n, m] : modules) {
      kinds.insert(m->kind());
      if (!n.empty() && n.find('.') == std::string::npos) names.push_back(n);
    }
    throw PolicyError(fmt::format(
        "--layer-precision: '{}' matches no module of this model; select modules by kind ({}; "
        "aliases embed, attn, conv, ln, bn, norm), by dotted name ({}, ...), or * for the whole "
        "model",
        rules[i].key, join(std::vector<std::string>(kinds.begin(), kinds.end())), join(names)));
  }
  // The rule in effect at a module: its own, else the nearest ancestor's.
  auto effective = [&](const std::string& name) -> std::optional<DType> {
    if (const auto i = resolver.rule_for(name)) return rules[*i].dtype;
    return std::nullopt;
  };

  // Storage.
  const bool narrow_params = narrow(policy.params);
  for (auto& [name, m] : modules) {
    DType d = policy.params;
    const std::optional<DType> rule = effective(name);
    if (narrow_params) {
      if (rule) {
        d = *rule;
      } else if (policy.norm_fp32 && m->kind() == "batch_norm2d") {
        d = DType::fp32;
      }
    }
    for (auto& [pn, p] : m->named_parameters(false)) nn::convert_tensor_in_place(p, d);
    for (auto& [bn, b] : m->named_buffers(false)) nn::convert_tensor_in_place(b, d);
  }

  // Forward wrappers.
  const std::string_view mode = policy.mode();
  const DType pure_dtype = policy.compute;
  for (auto& [name, m] : modules) {
    std::optional<Region> region;
    if (const auto i = resolver.own_rule(name)) region = Region{rules[*i].dtype, mode, pure_dtype};
    if (!name.empty()) {
      if (region) {
        const Region r = *region;
        m->set_forward_wrapper(
            [r](nn::Module& self, const Tensor& x) { return run_region(r, self, x); });
      } else {
        m->set_forward_wrapper({});
      }
      continue;
    }
    // The model itself: input and output casts around its (possible) region.
    const bool cast_input = mode == "pure";
    const DType out = policy.output;
    m->set_forward_wrapper(
        [region, cast_input, pure_dtype, out](nn::Module& self, const Tensor& x) {
          const Tensor in = cast_input ? cast(x, pure_dtype) : x;
          const Tensor y = region ? run_region(*region, self, in) : self.forward(in);
          return cast(y, out);
        });
  }
}

}  // namespace mixp::amp
