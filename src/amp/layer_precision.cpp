#include "mixp/amp/layer_precision.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "mixp/amp/autocast.h"
#include "mixp/autograd/grad_mode.h"
#include "mixp/nn/module.h"
#include "mixp/ops/matmul_precision.h"
#include "util/text.h"

namespace mixp::amp {

namespace {

using ::mixp::detail::join;
using ::mixp::detail::trim;

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

void convert_tensor_in_place(Tensor& t, DType dtype) {
  if (!t.defined() || !t.is_floating_point() || t.dtype() == dtype) return;
  Tensor c;
  {
    NoGradGuard ng;
    c = t.detach().to(dtype, Round::nearest_even).contiguous();
  }
  TensorImpl* impl = t.impl();
  impl->storage = c.impl()->storage;
  impl->offset = c.impl()->offset;
  impl->shape = c.impl()->shape;
  impl->strides = c.impl()->strides;
  impl->dtype = dtype;
  impl->grad.reset();
}

std::vector<LayerRule> parse_layer_precision(std::string_view spec_in) {
  const std::string spec = trim(spec_in);
  std::vector<LayerRule> rules;
  if (spec.empty()) return rules;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t end = spec.find(',', pos);
    if (end == std::string::npos) end = spec.size();
    const std::string item = trim(std::string_view(spec).substr(pos, end - pos));
    pos = end + 1;
    if (item.empty()) {
      if (end == spec.size()) break;
      throw PolicyError(
          fmt::format("--layer-precision '{}' has an empty entry between commas", spec));
    }
    const size_t eq = item.find('=');
    if (eq == std::string::npos || trim(item.substr(0, eq)).empty())
      throw PolicyError(fmt::format(
          "--layer-precision entry '{}' is not layer=dtype (e.g. embed=fp32,attn=bf16,head=fp32)",
          item));
    const std::string key = trim(item.substr(0, eq)), v = trim(item.substr(eq + 1));
    const std::optional<DType> d = parse_policy_dtype(v);
    if (!d || !(*d == DType::fp32 || narrow(*d))) {
      const bool fp8 = v.rfind("fp8", 0) == 0 || v.rfind("mxfp8", 0) == 0;
      throw PolicyError(fmt::format(
          "--layer-precision {}={}: a layer can run in fp32, bf16 or fp16{}", key, v,
          fp8 ? " (fp8 layers need an FP8 recipe: --precision fp8, fp8-current or mxfp8, which "
                "take NAME=fp8)"
              : ""));
    }
    rules.push_back({key, *d});
  }
  return rules;
}

std::vector<std::string> modules_matching(nn::Module& model, const LayerRule& rule) {
  std::vector<std::string> out;
  const std::vector<std::string> kinds = kinds_of(rule.key);
  for (auto& [name, m] : model.named_modules()) {
    const bool by_kind = std::find(kinds.begin(), kinds.end(), m->kind()) != kinds.end();
    if (by_kind || name == rule.key) out.push_back(name);
  }
  return out;
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
  // Which rule each module gets: name rules beat kind rules; the last of a sort wins.
  std::map<std::string, DType> by_kind_rule, by_name_rule;
  for (const LayerRule& r : rules) {
    const std::vector<std::string> hit = modules_matching(model, r);
    if (hit.empty()) {
      std::set<std::string> kinds;
      std::vector<std::string> names;
      for (auto& [n, m] : modules) {
        kinds.insert(m->kind());
        if (!n.empty() && n.find('.') == std::string::npos) names.push_back(n);
      }
      throw PolicyError(fmt::format(
          "--layer-precision: '{}' matches no module of this model; select modules by kind ({}; "
          "aliases embed, attn, conv, ln, bn, norm) or by dotted name ({}, ...)",
          r.key, join(std::vector<std::string>(kinds.begin(), kinds.end())), join(names)));
    }
    for (const std::string& n : hit) {
      nn::Module* m = nullptr;
      for (auto& [mn, mp] : modules)
        if (mn == n) m = mp;
      if (n == r.key) {
        by_name_rule[n] = r.dtype;
      } else if (m) {
        by_kind_rule[n] = r.dtype;
      }
    }
  }
  std::map<std::string, DType> rule_of;  // module name -> its own rule
  for (auto& [n, d] : by_kind_rule) rule_of[n] = d;
  for (auto& [n, d] : by_name_rule) rule_of[n] = d;
  // The rule in effect at a module: its own, else the nearest ancestor's.
  auto effective = [&](const std::string& name) -> std::optional<DType> {
    std::string n = name;
    while (true) {
      auto it = rule_of.find(n);
      if (it != rule_of.end()) return it->second;
      if (n.empty()) return std::nullopt;
      const size_t dot = n.rfind('.');
      n = dot == std::string::npos ? std::string() : n.substr(0, dot);
    }
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
    for (auto& [pn, p] : m->named_parameters(false)) convert_tensor_in_place(p, d);
    for (auto& [bn, b] : m->named_buffers(false)) convert_tensor_in_place(b, d);
  }

  // Forward wrappers.
  const std::string_view mode = policy.mode();
  const DType pure_dtype = policy.compute;
  for (auto& [name, m] : modules) {
    std::optional<Region> region;
    if (auto it = rule_of.find(name); it != rule_of.end())
      region = Region{it->second, mode, pure_dtype};
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
