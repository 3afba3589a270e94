#include "mixp/nn/lora.h"

#include <fmt/format.h>
#include <fnmatch.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include "mixp/autograd/grad_mode.h"
#include "mixp/nn/dropout.h"
#include "mixp/nn/init.h"
#include "mixp/nn/serialize.h"
#include "mixp/ops/ops.h"
#include "mixp/tensor/factories.h"

namespace mixp::nn {

namespace {

[[noreturn]] void bad(const std::string& what) {
  throw std::invalid_argument("--lora: " + what);
}

double number(std::string_view key, std::string_view v) {
  const std::string s(v);
  char* end = nullptr;
  errno = 0;
  const double d = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || errno == ERANGE || !std::isfinite(d))
    bad(fmt::format("{}={} is not a number", key, v));
  return d;
}

bool is_adapter_name(std::string_view last) {
  return last == "lora_A" || last == "lora_B";
}

std::string_view last_part(std::string_view name) {
  const size_t dot = name.rfind('.');
  return dot == std::string_view::npos ? name : name.substr(dot + 1);
}

// The Linear layers an adapter may go on (adapters themselves excluded), in model order.
std::vector<std::pair<std::string, Linear*>> base_linears(Module& model) {
  std::vector<std::pair<std::string, Linear*>> out;
  for (auto& [name, m] : model.named_modules()) {
    auto* lin = dynamic_cast<Linear*>(m);
    if (lin && !is_adapter_name(last_part(name))) out.emplace_back(name, lin);
  }
  return out;
}

// The adapter's forward, installed as the Linear's branch (linear.h): scaling * B(A(drop(x))).
struct LoraBranch {
  Linear* a;
  Linear* b;
  Dropout* drop;
  double scaling;
  Tensor operator()(const Tensor& x) const {
    const Tensor in = drop ? (*drop)(x) : x;
    return mul((*b)((*a)(in)), scaling);
  }
};

}  // namespace

double LoraOptions::scaling() const {
  return use_rslora ? alpha / std::sqrt(double(r)) : alpha / double(r);
}

LoraOptions LoraOptions::parse(std::string_view spec) {
  LoraOptions o;
  bool have_r = false, have_alpha = false;
  std::vector<std::string_view> items;
  for (size_t pos = 0; pos <= spec.size();) {
    size_t comma = spec.find(',', pos);
    if (comma == std::string_view::npos) comma = spec.size();
    items.push_back(spec.substr(pos, comma - pos));
    pos = comma + 1;
  }
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string_view item = items[i];
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) bad(fmt::format("'{}' is not key=value", item));
    const std::string_view key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "targets") {
      // This value and every following item without '=' are patterns.
      for (std::string_view pat = value;; pat = items[++i]) {
        if (pat.empty()) bad("targets has an empty pattern");
        o.targets.emplace_back(pat);
        if (i + 1 >= items.size() || items[i + 1].find('=') != std::string_view::npos) break;
      }
    } else if (key == "r") {
      const double d = number(key, value);
      if (d != std::floor(d) || d < 1 || d > 1e6)
        bad(fmt::format("r={} must be an integer >= 1", value));
      o.r = int64_t(d);
      have_r = true;
    } else if (key == "alpha") {
      o.alpha = number(key, value);
      if (!(o.alpha > 0)) bad(fmt::format("alpha={} must be > 0", value));
      have_alpha = true;
    } else if (key == "dropout") {
      o.dropout = number(key, value);
      if (!(o.dropout >= 0 && o.dropout < 1))
        bad(fmt::format("dropout={} must be in [0, 1)", value));
    } else if (key == "rslora") {
      if (value != "0" && value != "1" && value != "true" && value != "false")
        bad(fmt::format("rslora={} must be true or false", value));
      o.use_rslora = value == "1" || value == "true";
    } else {
      bad(fmt::format("unknown key '{}' (keys: r, alpha, dropout, rslora, targets)", key));
    }
  }
  if (!have_r) bad("r is required (e.g. r=16,alpha=32,targets=qkv,proj)");
  // PEFT's LoraConfig default lora_alpha is 8 whatever r is; without alpha, scaling 1 is the
  // common choice (alpha = r) and is what we take.
  if (!have_alpha) o.alpha = double(o.r);
  if (o.targets.empty()) bad("targets is required: the Linear layers to adapt, by name pattern");
  return o;
}

std::string LoraOptions::str() const {
  std::string s = fmt::format("r={},alpha={:g},dropout={:g}", r, alpha, dropout);
  if (use_rslora) s += ",rslora=true";
  s += ",targets=";
  for (size_t i = 0; i < targets.size(); ++i) s += (i ? "," : "") + targets[i];
  return s;
}

bool lora_target_matches(std::string_view pattern, std::string_view module_name) {
  const std::string pat(pattern);
  const std::string name(module_name);
  size_t start = 0;
  while (true) {
    if (fnmatch(pat.c_str(), name.c_str() + start, 0) == 0) return true;
    const size_t dot = name.find('.', start);
    if (dot == std::string::npos) return false;
    start = dot + 1;
  }
}

std::vector<std::string> apply_lora(Module& model, const LoraOptions& opt, uint64_t seed) {
  if (opt.r < 1) bad(fmt::format("r={} must be >= 1", opt.r));
  if (!(opt.alpha > 0)) bad(fmt::format("alpha={:g} must be > 0", opt.alpha));
  if (!(opt.dropout >= 0 && opt.dropout < 1))
    bad(fmt::format("dropout={:g} must be in [0, 1)", opt.dropout));
  if (opt.targets.empty()) bad("no targets");
  if (!lora_layers(model).empty()) bad("the model has adapters already");
  const auto linears = base_linears(model);
  for (const auto& pat : opt.targets) {
    bool any = false;
    for (const auto& [name, lin] : linears) any = any || lora_target_matches(pat, name);
    if (!any) {
      std::string names;
      for (size_t i = 0; i < linears.size() && i < 24; ++i)
        names += (i ? ", " : "") + linears[i].first;
      if (linears.size() > 24) names += fmt::format(", ... ({} in all)", linears.size());
      bad(fmt::format("target '{}' matches no Linear layer of this model; its Linear layers: {}",
                      pat, names.empty() ? "(none)" : names));
    }
  }
  // Freeze the base first, so that only what is registered below trains.
  for (auto& [name, p] : model.named_parameters()) p.requires_grad_(false);
  Generator gen(seed);
  std::vector<std::string> out;
  uint64_t k = 0;
  for (const auto& [name, lin] : linears) {
    bool hit = false;
    for (const auto& pat : opt.targets) hit = hit || lora_target_matches(pat, name);
    if (!hit) continue;
    const int64_t in = lin->in_features(), outf = lin->out_features();
    auto a = std::make_shared<Linear>(in, opt.r, gen, LinearOptions{.bias = false});
    auto b = std::make_shared<Linear>(opt.r, outf, gen, LinearOptions{.bias = false});
    {
      NoGradGuard ng;
      Tensor bw = b->weight();  // a handle on the parameter
      bw.zero_();
    }
    // A 4-bit frozen base (quant/qlora.h: uint8 codes) keeps fp32 adapters: the bf16 recipe's
    // masters, as PEFT's prepare_model_for_kbit_training leaves them.
    const DType dt = lin->weight().is_floating_point() ? lin->weight().dtype() : DType::fp32;
    if (dt != DType::fp32) {
      convert_module(*a, dt);
      convert_module(*b, dt);
    }
    lin->register_module("lora_A", a);
    lin->register_module("lora_B", b);
    std::shared_ptr<Dropout> drop;
    if (opt.dropout > 0) {
      drop = lin->register_module(
          "lora_dropout",
          std::make_shared<Dropout>(opt.dropout, Generator::splitmix64(seed + ++k)));
    }
    lin->set_branch(LoraBranch{a.get(), b.get(), drop.get(), opt.scaling()});
    out.push_back(name);
  }
  return out;
}

LoraAdapter lora_adapter_of(Linear& layer) {
  const auto* br = layer.branch().target<LoraBranch>();
  if (!br) return {};
  return {br->a, br->b, br->scaling};
}

std::vector<std::pair<std::string, Linear*>> lora_layers(Module& model) {
  std::vector<std::pair<std::string, Linear*>> out;
  for (auto& [name, lin] : base_linears(model)) {
    const LoraAdapter ad = lora_adapter_of(*lin);
    if (ad.a && ad.b) out.emplace_back(name, lin);
  }
  return out;
}


Tensor lora_merged_weight(Linear& layer) {
  const LoraAdapter ad = lora_adapter_of(layer);
  if (!ad.a) throw std::invalid_argument("mixp::nn::lora_merged_weight: the layer has no adapter");
  if (!layer.weight().is_floating_point())
    throw std::invalid_argument(
        "mixp::nn::lora_merged_weight: the base weight is 4-bit (QLoRA); merge into a "
        "dequantized copy of the base");
  NoGradGuard ng;
  const Tensor w = layer.weight().to(DType::fp32);
  const Tensor delta = matmul(ad.b->weight().to(DType::fp32), ad.a->weight().to(DType::fp32));
  return (w + mul(delta, ad.scaling)).to(layer.weight().dtype());
}

}  // namespace mixp::nn
