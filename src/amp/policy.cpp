#include "mixp/amp/policy.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <span>

#include "mixp/format/cpu_features.h"
#include "util/key_value.h"
#include "util/text.h"

#if __has_include("mixp/backend/platform.h")
#include "mixp/backend/platform.h"
#define MIXP_HAVE_PLATFORM 1
#endif

namespace mixp::amp {

namespace {

using ::mixp::detail::join;
using ::mixp::detail::KeyValueError;
using ::mixp::detail::lower;
using ::mixp::detail::trim;

constexpr std::string_view kKey = "policy key";

bool narrow(DType d) {
  return d == DType::bf16 || d == DType::fp16;
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

}  // namespace

// The policy presets, in the order of docs/architecture.md 3.6 (`auto` resolves to one of them).
// Each is a whole policy recipe: train::recipe_registry() makes one entry of each, so a new preset
// is one row here (docs/architecture.md 8). The recipe names around them (FP8, int8-qat) are the
// registry's own rows.
std::span<const PolicyPreset> policy_presets() {
  using D = DType;
  constexpr LossScaling kDynamic = LossScaling::dynamic;
  static const PolicyPreset k[] = {
      {{.name = "fp64", .params = D::fp64, .compute = D::fp64, .output = D::fp64},
       "the reference other precisions are judged against: parameters, compute and optimizer "
       "states in fp64"},
      {{.name = "fp32"}, "the baseline (Apex O0): everything in fp32"},
      {{.name = "tf32", .compute = D::tf32},
       "fp32 with GEMM inputs rounded to TF32: what an Ampere+ GPU does to fp32 by default; on a "
       "CPU it only shows the accuracy cost"},
      {{.name = "bf16", .compute = D::bf16, .autocast = true},
       "Autocast bf16 over fp32 parameters, no loss scaling (bf16 has fp32's exponent range): the "
       "default choice on hardware with bf16 (AVX512_BF16, AMX, Ampere+)"},
      // Stochastic rounding of the write-back and of the bf16 Adam states (llm.c).
      {{.name = "bf16-pure", .params = D::bf16, .compute = D::bf16, .master_weights = false,
        .rounding = Round::stochastic, .states = D::bf16},
       "bf16 parameters, activations and Adam states, no master copy, stochastic write-back: the "
       "least memory; llm.c's way of training in pure bf16"},
      {{.name = "fp16", .compute = D::fp16, .autocast = true, .loss_scaling = kDynamic},
       "Autocast fp16 over fp32 parameters with dynamic loss scaling (Apex O1): hardware with "
       "fp16 but no bf16 (Volta, Turing)"},
      {{.name = "fp16-o2", .params = D::fp16, .compute = D::fp16, .autocast = true,
        .norm_fp32 = true, .loss_scaling = kDynamic},
       "fp16 parameters except BatchNorm, fp32 master weights, Autocast at the fp32/fp16 seams, "
       "dynamic loss scaling (Apex O2): less weight memory than O1, same update accuracy"},
      // Apex O3's default is a fixed scale of 1: fp16-pure:loss_scale=1 gives it.
      {{.name = "fp16-pure", .params = D::fp16, .compute = D::fp16, .master_weights = false,
        .loss_scaling = kDynamic},
       "fp16 parameters and activations, no master copy, nearest write-back, dynamic loss "
       "scaling (Apex O3): a speed-of-light baseline; small updates are lost"},
  };
  return k;
}

const PrecisionPolicy* find_preset(std::string_view n) {
  for (const PolicyPreset& p : policy_presets())
    if (n == p.policy.name) return &p.policy;
  return nullptr;
}

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
  static const std::vector<std::string> v = [] {
    std::vector<std::string> n;
    for (const PolicyPreset& p : policy_presets()) n.push_back(p.policy.name);
    n.emplace_back("auto");
    return n;
  }();
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

namespace {

PrecisionPolicy parse_policy_or_throw(std::string_view spec) {
  const detail::SpecParts parts = detail::split_spec(spec);
  // Keys alone refine fp32 (O0), as jmp's get_policy starts from full precision.
  std::string base = !parts.has_colon && !parts.options.empty() ? "fp32" : lower(parts.base);
  const std::string requested = base;
  if (base == "auto") base = auto_preset();
  const PrecisionPolicy* preset = find_preset(base);
  if (!preset) {
    throw PolicyError(fmt::format(
        "unknown policy preset '{}'; presets: {}, or a policy string such as "
        "'bf16:params=fp32,compute=bf16,output=fp32' (keys: {}); the other training recipes "
        "(FP8, int8-qat) are built by train::make_recipe",
        parts.base, join(preset_names()), join(key_names())));
  }
  PrecisionPolicy p = *preset;
  std::map<std::string, std::string> given;
  std::vector<std::string> order;
  for (auto& [k, v] :
       detail::split_key_values(parts.options, {.list = "policy string",
                                               .entry = "key=value",
                                               .example = "'bf16:params=fp32,compute=bf16'",
                                               .noun = kKey,
                                               .keys = key_names(),
                                               .lower_keys = true})) {
    given[k] = v;
    order.push_back(k);
  }
  auto dtype_value = [&](const std::string& k, std::initializer_list<DType> allowed) {
    const std::string& v = given.at(k);
    const std::optional<DType> d = parse_policy_dtype(v);
    if (!d || std::find(allowed.begin(), allowed.end(), *d) == allowed.end())
      detail::throw_value_error(kKey, k, v, dtype_list(allowed));
    return *d;
  };
  using D = DType;
  if (given.count("params")) p.params = dtype_value("params", {D::fp64, D::fp32, D::bf16, D::fp16});
  if (given.count("compute"))
    p.compute = dtype_value("compute", {D::fp64, D::fp32, D::tf32, D::bf16, D::fp16});
  if (given.count("output")) p.output = dtype_value("output", {D::fp64, D::fp32, D::bf16, D::fp16});
  if (given.count("states")) p.states = dtype_value("states", {D::fp32, D::bf16});
  auto on_off = [&](const char* k) { return detail::parse_on_off(kKey, k, given.at(k)); };
  auto choice = [&](const char* k, std::initializer_list<std::string_view> choices) {
    return detail::parse_choice(kKey, k, given.at(k), choices);
  };
  auto positive = [&](const char* k) { return detail::parse_positive(kKey, k, given.at(k)); };
  if (given.count("master")) p.master_weights = on_off("master");
  if (given.count("kahan")) p.kahan = on_off("kahan");
  if (given.count("rounding")) {
    p.rounding = choice("rounding", {"nearest|nearest-even|nearest_even", "stochastic"}) == 0
                     ? Round::nearest_even
                     : Round::stochastic;
  }
  if (given.count("norm")) p.norm_fp32 = choice("norm", {"fp32|float32|f32", "params"}) == 0;
  if (given.count("ln_save"))
    p.norm_saves_low = choice("ln_save", {"compute", "fp32|float32|f32"}) == 0;
  // Derived defaults: follow the final params/compute unless given.
  if (given.count("autocast")) {
    p.autocast = on_off("autocast");
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
      p.loss_scale = positive("loss_scale");
    }
  } else if (given.count("params") || given.count("compute")) {
    p.loss_scaling = p.uses_fp16() ? LossScaling::dynamic : LossScaling::none;
  }
  if (given.count("loss_scale_init")) {
    if (p.loss_scaling != LossScaling::dynamic)
      throw PolicyError(
          "policy key 'loss_scale_init' needs dynamic loss scaling (loss_scale=dynamic)");
    p.loss_scale = positive("loss_scale_init");
  }
  if (given.count("growth_interval")) {
    if (p.loss_scaling != LossScaling::dynamic)
      throw PolicyError(
          "policy key 'growth_interval' needs dynamic loss scaling (loss_scale=dynamic)");
    const double g = positive("growth_interval");
    if (g != std::floor(g) || g > 1e15)
      detail::throw_value_error(kKey, "growth_interval", given["growth_interval"],
                                "a positive integer");
    p.growth_interval = static_cast<int64_t>(g);
  }

  auto dynamic_only = [&](const char* k) {
    if (p.loss_scaling != LossScaling::dynamic)
      throw PolicyError(
          fmt::format("policy key '{}' needs dynamic loss scaling (loss_scale=dynamic)", k));
  };
  if (given.count("loss_scale_min")) {
    dynamic_only("loss_scale_min");
    const std::string v = given["loss_scale_min"];
    p.loss_scale_min = v == "0" ? 0.0 : positive("loss_scale_min");
  }
  if (given.count("loss_scale_max")) {
    dynamic_only("loss_scale_max");
    p.loss_scale_max = positive("loss_scale_max");
  }
  if (given.count("collapse_after")) {
    dynamic_only("collapse_after");
    p.collapse_after = detail::parse_integer(kKey, "collapse_after", given["collapse_after"], 0,
                                             std::numeric_limits<int64_t>::max());
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

}  // namespace

PrecisionPolicy parse_policy(std::string_view spec) {
  try {
    return parse_policy_or_throw(spec);
  } catch (const KeyValueError& e) {
    throw PolicyError(e.what());
  }
}

}  // namespace mixp::amp
