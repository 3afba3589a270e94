#include "mixp/amp/policy.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>

#include "mixp/backend/cpu_features.h"

#if __has_include("mixp/backend/platform.h")
#include "mixp/backend/platform.h"
#include "util/text.h"
#define MIXP_HAVE_PLATFORM 1
#endif

namespace mixp::amp {

namespace {

using ::mixp::detail::join;
using ::mixp::detail::lower;
using ::mixp::detail::trim;

bool narrow(DType d) {
  return d == DType::bf16 || d == DType::fp16;
}

PrecisionPolicy preset(const std::string& n) {
  PrecisionPolicy p;
  p.name = n;
  if (n == "fp64") {
    p.params = p.compute = p.output = DType::fp64;
  } else if (n == "fp32") {
  } else if (n == "tf32") {
    p.compute = DType::tf32;
  } else if (n == "bf16") {
    p.compute = DType::bf16;
    p.autocast = true;
  } else if (n == "fp16") {
    p.compute = DType::fp16;
    p.autocast = true;
    p.loss_scaling = LossScaling::dynamic;
  } else if (n == "fp16-o2") {
    p.params = p.compute = DType::fp16;
    p.autocast = true;
    p.norm_fp32 = true;
    p.loss_scaling = LossScaling::dynamic;
  } else if (n == "fp16-pure") {
    p.params = p.compute = DType::fp16;
    p.master_weights = false;
    p.loss_scaling = LossScaling::dynamic;
  } else if (n == "bf16-pure") {
    p.params = p.compute = DType::bf16;
    p.master_weights = false;
    p.rounding = Round::stochastic;
    p.states = DType::bf16;
  } else {
    throw std::logic_error("mixp::amp: no preset " + n);
  }
  return p;
}

const std::vector<std::string>& key_names() {
  static const std::vector<std::string> k{
      "params",          "compute",         "output",         "autocast",       "master",
      "rounding",        "kahan",           "states",         "norm",           "loss_scale",
      "loss_scale_init", "growth_interval", "loss_scale_min", "loss_scale_max", "collapse_after",
      "ln_save"};
  return k;
}

std::string dtype_list(std::initializer_list<DType> ds) {
  std::vector<std::string> v;
  for (DType d : ds) v.emplace_back(name(d));
  return join(v, "|");
}

bool parse_on_off(const std::string& key, const std::string& v) {
  const std::string l = lower(v);
  if (l == "on" || l == "true" || l == "1" || l == "yes") return true;
  if (l == "off" || l == "false" || l == "0" || l == "no") return false;
  throw PolicyError(fmt::format("policy key '{}' takes on or off, got '{}'", key, v));
}

double parse_positive(const std::string& key, const std::string& v) {
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(v, &used);
  } catch (...) {
    used = 0;
  }
  if (used != v.size() || !(x > 0) || !std::isfinite(static_cast<float>(x)))
    throw PolicyError(fmt::format(
        "policy key '{}' takes a positive number that is finite in fp32, got '{}'", key, v));
  return x;
}

}  // namespace

const std::vector<std::string>& policy_keys() {
  return key_names();
}

std::string_view PrecisionPolicy::mode() const {
  if (autocast) return "mixed";
  if (narrow(params) || narrow(compute)) return "pure";
  return "full";
}

std::string PrecisionPolicy::describe() const {
  std::string s = fmt::format("params {}", mixp::name(params));
  if (narrow(params) && norm_fp32) s += " (BatchNorm fp32)";
  if (narrow(params)) s += master_weights ? " with fp32 master weights" : " without master weights";
  if (narrow(params) && !master_weights)
    s += fmt::format(", {} write-back{}", rounding == Round::stochastic ? "stochastic" : "nearest",
                     kahan ? " with Kahan compensation" : "");
  s += fmt::format(", compute {}", mixp::name(compute));
  if (autocast) s += " (autocast)";
  s += fmt::format(", output {}", mixp::name(output));
  if (states != DType::fp32 && params != DType::fp64)
    s += fmt::format(", optimizer states {}", mixp::name(states));
  switch (loss_scaling) {
    case LossScaling::none:
      s += ", no loss scaling";
      break;
    case LossScaling::dynamic:
      s += fmt::format(", dynamic loss scaling from {:g} (growth interval {})", loss_scale,
                       growth_interval);
      break;
    case LossScaling::fixed:
      s += fmt::format(", fixed loss scale {:g}", loss_scale);
      break;
  }
  return s;
}

const std::vector<std::string>& preset_names() {
  static const std::vector<std::string> v{"fp64", "fp32",    "tf32",      "bf16", "bf16-pure",
                                          "fp16", "fp16-o2", "fp16-pure", "auto"};
  return v;
}

const std::vector<std::string>& planned_recipe_names() {
  static const std::vector<std::string> v{"fp64",  "fp32",     "tf32",      "bf16", "bf16-pure",
                                          "fp16",  "fp16-o2",  "fp16-pure", "fp8",  "fp8-current",
                                          "mxfp8", "int8-qat", "auto"};
  return v;
}

std::string auto_preset() {
#ifdef MIXP_HAVE_PLATFORM
  // `mixp doctor`'s decision tree for the device training runs on: the CPU (the Trainer has no
  // CUDA path yet, so a GPU's advice — fp16 on Volta — would pick an emulated format here).
  return recommend_precision(cpu_features(), std::span<const GpuInfo>{}).precision;
#else
  // The CPU branch of `mixp doctor`'s decision tree: bf16 where the CPU multiplies bf16 natively
  // (AVX512_BF16, AMX-BF16), else fp32 (16-bit formats would be emulated: slower, not faster).
  const CpuFeatures& f = cpu_features();
  const bool bf16 = (f.avx512_bf16 && f.os_avx512) || (f.amx_bf16 && f.os_amx);
  return bf16 ? "bf16" : "fp32";
#endif
}

std::optional<DType> parse_policy_dtype(std::string_view s) {
  static const std::map<std::string, DType> names{
      {"fp64", DType::fp64},    {"f64", DType::fp64},   {"float64", DType::fp64},
      {"double", DType::fp64},  {"fp32", DType::fp32},  {"f32", DType::fp32},
      {"float32", DType::fp32}, {"float", DType::fp32}, {"full", DType::fp32},
      {"tf32", DType::tf32},    {"bf16", DType::bf16},  {"bfloat16", DType::bf16},
      {"fp16", DType::fp16},    {"f16", DType::fp16},   {"float16", DType::fp16},
      {"half", DType::fp16}};
  auto it = names.find(lower(std::string(s)));
  if (it == names.end()) return std::nullopt;
  return it->second;
}

PrecisionPolicy parse_policy(std::string_view spec_in) {
  const std::string spec = trim(spec_in);
  std::string base = spec, keys;
  const size_t colon = spec.find(':');
  const size_t eq = spec.find('=');
  if (colon != std::string::npos && (eq == std::string::npos || colon < eq)) {
    base = trim(spec.substr(0, colon));
    keys = spec.substr(colon + 1);
  } else if (eq != std::string::npos) {
    base = "fp32";  // a bare policy string refines O0, as jmp's get_policy starts from full
    keys = spec;
  }
  const std::string requested = base;
  if (base == "auto") base = auto_preset();
  const auto& presets = preset_names();
  if (std::find(presets.begin(), presets.end(), base) == presets.end()) {
    // What --precision takes: every recipe name. The FP8 recipes and int8-qat are not policy
    // presets: train::make_recipe routes them before a policy is parsed.
    const auto& avail = planned_recipe_names();
    if (std::find(avail.begin(), avail.end(), base) != avail.end()) {
      throw PolicyError(fmt::format(
          "precision '{}' is a training recipe, not a policy preset: train::make_recipe builds it "
          "(FP8 options as 'fp8:amax_history=16'; int8-qat takes no policy keys)",
          base));
    }
    throw PolicyError(
        fmt::format("unknown precision '{}'; available: {}, or a policy string such as "
                    "'bf16:params=fp32,compute=bf16,output=fp32' (keys: {})",
                    base, join(avail), join(key_names())));
  }
  PrecisionPolicy p = preset(base);
  if (keys.empty() && trim(keys).empty() && colon == std::string::npos) return p;

  std::map<std::string, std::string> given;
  std::vector<std::string> order;
  size_t pos = 0;
  while (pos <= keys.size()) {
    size_t end = keys.find(',', pos);
    if (end == std::string::npos) end = keys.size();
    const std::string item = trim(std::string_view(keys).substr(pos, end - pos));
    pos = end + 1;
    if (item.empty()) {
      if (end == keys.size()) break;
      throw PolicyError(fmt::format("policy string '{}' has an empty entry between commas", spec));
    }
    const size_t e = item.find('=');
    if (e == std::string::npos)
      throw PolicyError(fmt::format(
          "policy entry '{}' is not key=value; keys: {} (e.g. 'bf16:params=fp32,compute=bf16')",
          item, join(key_names())));
    const std::string k = lower(trim(item.substr(0, e))), v = trim(item.substr(e + 1));
    if (std::find(key_names().begin(), key_names().end(), k) == key_names().end())
      throw PolicyError(fmt::format("unknown policy key '{}'; keys: {}", k, join(key_names())));
    if (given.count(k)) throw PolicyError(fmt::format("policy key '{}' is given twice", k));
    given[k] = v;
    order.push_back(k);
  }
  auto dtype_value = [&](const std::string& k, std::initializer_list<DType> allowed) {
    const std::string& v = given.at(k);
    const std::optional<DType> d = parse_policy_dtype(v);
    if (!d || std::find(allowed.begin(), allowed.end(), *d) == allowed.end())
      throw PolicyError(
          fmt::format("policy key '{}' takes {}, got '{}'", k, dtype_list(allowed), v));
    return *d;
  };
  using D = DType;
  if (given.count("params")) p.params = dtype_value("params", {D::fp64, D::fp32, D::bf16, D::fp16});
  if (given.count("compute"))
    p.compute = dtype_value("compute", {D::fp64, D::fp32, D::tf32, D::bf16, D::fp16});
  if (given.count("output")) p.output = dtype_value("output", {D::fp64, D::fp32, D::bf16, D::fp16});
  if (given.count("states")) p.states = dtype_value("states", {D::fp32, D::bf16});
  if (given.count("master")) p.master_weights = parse_on_off("master", given["master"]);
  if (given.count("kahan")) p.kahan = parse_on_off("kahan", given["kahan"]);
  if (given.count("rounding")) {
    const std::string v = lower(given["rounding"]);
    if (v == "nearest" || v == "nearest-even" || v == "nearest_even") {
      p.rounding = Round::nearest_even;
    } else if (v == "stochastic") {
      p.rounding = Round::stochastic;
    } else {
      throw PolicyError(fmt::format("policy key 'rounding' takes nearest or stochastic, got '{}'",
                                    given["rounding"]));
    }
  }
  if (given.count("norm")) {
    const std::string v = lower(given["norm"]);
    if (v == "fp32" || v == "float32" || v == "f32") {
      p.norm_fp32 = true;
    } else if (v == "params") {
      p.norm_fp32 = false;
    } else {
      throw PolicyError(
          fmt::format("policy key 'norm' takes fp32 or params, got '{}'", given["norm"]));
    }
  }
  if (given.count("ln_save")) {
    const std::string v = lower(given["ln_save"]);
    if (v == "compute") {
      p.norm_saves_low = true;
    } else if (v == "fp32" || v == "float32" || v == "f32") {
      p.norm_saves_low = false;
    } else {
      throw PolicyError(
          fmt::format("policy key 'ln_save' takes compute or fp32, got '{}'", given["ln_save"]));
    }
  }
  // Derived defaults: follow the final params/compute unless given.
  if (given.count("autocast")) {
    p.autocast = parse_on_off("autocast", given["autocast"]);
  } else if (given.count("params") || given.count("compute") || given.count("norm")) {
    p.autocast = narrow(p.compute) && (p.params != p.compute || p.norm_fp32);
  }
  if (given.count("loss_scale")) {
    const std::string v = lower(given["loss_scale"]);
    if (v == "dynamic") {
      p.loss_scaling = LossScaling::dynamic;
    } else if (v == "none" || v == "off") {
      p.loss_scaling = LossScaling::none;
    } else {
      p.loss_scaling = LossScaling::fixed;
      p.loss_scale = parse_positive("loss_scale", given["loss_scale"]);
    }
  } else if (given.count("params") || given.count("compute")) {
    p.loss_scaling = p.uses_fp16() ? LossScaling::dynamic : LossScaling::none;
  }
  if (given.count("loss_scale_init")) {
    if (p.loss_scaling != LossScaling::dynamic)
      throw PolicyError(
          "policy key 'loss_scale_init' needs dynamic loss scaling (loss_scale=dynamic)");
    p.loss_scale = parse_positive("loss_scale_init", given["loss_scale_init"]);
  }
  if (given.count("growth_interval")) {
    if (p.loss_scaling != LossScaling::dynamic)
      throw PolicyError(
          "policy key 'growth_interval' needs dynamic loss scaling (loss_scale=dynamic)");
    const double g = parse_positive("growth_interval", given["growth_interval"]);
    if (g != std::floor(g) || g > 1e15)
      throw PolicyError(
          fmt::format("policy key 'growth_interval' takes a positive integer, got '{}'",
                      given["growth_interval"]));
    p.growth_interval = static_cast<int64_t>(g);
  }

  auto dynamic_only = [&](const char* k) {
    if (p.loss_scaling != LossScaling::dynamic)
      throw PolicyError(
          fmt::format("policy key '{}' needs dynamic loss scaling (loss_scale=dynamic)", k));
  };
  auto count_value = [&](const char* k) {
    const std::string& v = given.at(k);
    size_t used = 0;
    long long n = -1;
    try {
      n = std::stoll(v, &used);
    } catch (...) {
      used = 0;
    }
    if (used != v.size() || n < 0)
      throw PolicyError(fmt::format("policy key '{}' takes an integer >= 0, got '{}'", k, v));
    return static_cast<int64_t>(n);
  };
  if (given.count("loss_scale_min")) {
    dynamic_only("loss_scale_min");
    const std::string v = given["loss_scale_min"];
    p.loss_scale_min = v == "0" ? 0.0 : parse_positive("loss_scale_min", v);
  }
  if (given.count("loss_scale_max")) {
    dynamic_only("loss_scale_max");
    p.loss_scale_max = parse_positive("loss_scale_max", given["loss_scale_max"]);
  }
  if (given.count("collapse_after")) {
    dynamic_only("collapse_after");
    p.collapse_after = count_value("collapse_after");
  }
  if (p.loss_scaling == LossScaling::dynamic) {
    if (p.loss_scale_max > 0 && p.loss_scale_min > p.loss_scale_max)
      throw PolicyError(fmt::format("loss_scale_min {:g} is above loss_scale_max {:g}",
                                    p.loss_scale_min, p.loss_scale_max));
  }

  // Combinations that cannot work.
  const bool any64 = p.params == D::fp64 || p.compute == D::fp64;
  if (any64 && !(p.params == D::fp64 && p.compute == D::fp64))
    throw PolicyError(
        "fp64 is the reference precision: params=fp64 and compute=fp64 go together (recipe fp64)");
  if (p.compute == D::tf32 && p.params != D::fp32)
    throw PolicyError("compute=tf32 rounds fp32 GEMM inputs; it needs params=fp32");
  if (p.autocast && !narrow(p.compute))
    throw PolicyError(fmt::format("autocast=on needs compute=bf16 or compute=fp16 (compute is {})",
                                  name(p.compute)));
  if (!p.autocast && narrow(p.compute) && p.params != p.compute)
    throw PolicyError(fmt::format(
        "compute={} with params={} needs autocast=on: without Autocast every op runs in its "
        "inputs' dtype, so the parameters must be stored in the compute dtype",
        name(p.compute), name(p.params)));
  if (!p.autocast && narrow(p.params) && p.compute != p.params)
    throw PolicyError(
        fmt::format("params={} without autocast needs compute={}", name(p.params), name(p.params)));
  if (p.kahan && p.master_weights && narrow(p.params))
    throw PolicyError(
        "kahan=on replaces fp32 master weights: give master=off with it (e.g. "
        "'bf16-pure:rounding=nearest,kahan=on')");
  if (p.kahan && !narrow(p.params))
    throw PolicyError(
        "kahan=on compensates the rounding of 16-bit parameters; it needs "
        "params=bf16 or params=fp16");
  if (given.count("rounding") && !narrow(p.params))
    throw PolicyError(
        "rounding applies to the write-back of 16-bit parameters; it needs "
        "params=bf16 or params=fp16");
  if (p.params == D::fp64 && p.output != D::fp64)
    throw PolicyError("with params=fp64 the output is fp64 too");
  if (p.params == D::fp64 && p.loss_scaling != LossScaling::none)
    throw PolicyError("fp64 has no use for loss scaling");

  if (!order.empty() || requested == "auto") {
    std::string canon = base;
    if (!order.empty()) {
      canon += ":";
      for (size_t i = 0; i < order.size(); ++i)
        canon += (i ? "," : "") + order[i] + "=" + given[order[i]];
    }
    p.name = canon;
  }
  return p;
}

}  // namespace mixp::amp
