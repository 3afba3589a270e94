#include "mixp/amp/fp8_scaling.h"

#include <fmt/format.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <stdexcept>

#include "mixp/autograd/grad_mode.h"
#include "mixp/backend/backend.h"
#include "mixp/tensor/factories.h"
#include "util/enum_names.h"

namespace mixp::amp {

namespace {
constexpr mixp::detail::EnumName<Fp8Role> kRoleNames[] = {
    {Fp8Role::input, "input"}, {Fp8Role::weight, "weight"}, {Fp8Role::grad_output, "grad_output"}};
constexpr mixp::detail::EnumName<Fp8Scaling> kScalingNames[] = {
    {Fp8Scaling::delayed, "delayed"}, {Fp8Scaling::current, "current"},
    {Fp8Scaling::mxfp8, "mxfp8"},     {Fp8Scaling::fp8_block, "fp8-block"},
    {Fp8Scaling::nvfp4, "nvfp4"},     {Fp8Scaling::mxfp4, "mxfp4"}};
}  // namespace

std::string_view to_string(Fp8Role r) {
  return mixp::detail::name_of(kRoleNames, r);
}

std::string_view to_string(Fp8Scaling s) {
  return mixp::detail::name_of(kScalingNames, s);
}

std::string_view to_string(Fp8Format f) {
  return f == Fp8Format::hybrid ? "HYBRID" : "E4M3";
}

std::string_view to_string(AmaxComputeAlgo a) {
  return a == AmaxComputeAlgo::max ? "max" : "most_recent";
}

DType Fp8Recipe::dtype(Fp8Role role) const {
  if (role == Fp8Role::grad_output && format == Fp8Format::hybrid) return DType::fp8_e5m2;
  return DType::fp8_e4m3;
}

void Fp8Recipe::validate() const {
  if (amax_history_len < 1) {
    throw std::invalid_argument(
        fmt::format("FP8 recipe: the amax history length must be at least 1, got {}",
                    amax_history_len));
  }
  if (margin < 0 || margin > 64) {
    throw std::invalid_argument(
        fmt::format("FP8 recipe: the margin must be in [0, 64], got {}", margin));
  }
  if (mx_block < 1) {
    throw std::invalid_argument(
        fmt::format("FP8 recipe: the MX block size must be at least 1, got {}", mx_block));
  }
  if (bf16_last < 0 || promote < 0) {
    throw std::invalid_argument(fmt::format(
        "FP8 recipe: bf16_last and promote must be >= 0, got {} and {}", bf16_last, promote));
  }
}

std::string Fp8Recipe::describe() const {
  const std::string fmt_s = format == Fp8Format::hybrid ? "HYBRID (E4M3 forward, E5M2 gradients)"
                                                        : "E4M3 (forward and gradients)";
  switch (scaling) {
    case Fp8Scaling::delayed:
      return fmt::format("delayed scaling, {}, amax history {} ({}), margin {}", fmt_s,
                         amax_history_len, to_string(amax_compute_algo), margin);
    case Fp8Scaling::current:
      return fmt::format("current scaling, {}, margin {}", fmt_s, margin);
    case Fp8Scaling::mxfp8:
      return fmt::format("MXFP8 block scaling (blocks of {} along K, e8m0 scales), {}", mx_block,
                         fmt_s);
    case Fp8Scaling::fp8_block:
      return fmt::format(
          "FP8 block scaling (E4M3, 1x128 activations and gradients, 128x128 weights, {} scales), "
          "{}",
          pow2 ? "power-of-two" : "fp32",
          promote ? fmt::format("14-bit accumulator promoted to fp32 every {} products", promote)
                  : std::string("fp32 accumulation"));
    case Fp8Scaling::nvfp4:
      return fmt::format(
          "NVFP4 (E2M1, 1x16 blocks with E4M3 scales and an fp32 tensor scale; weights {}; wgrad "
          "RHT {}; gradient SR {}; last {} block(s) in bf16)",
          weight_2d ? "16x16" : "1x16", rht ? "on" : "off", sr ? "on" : "off", bf16_last);
    case Fp8Scaling::mxfp4:
      return fmt::format(
          "MXFP4 (E2M1, 1x32 blocks with E8M0 scales; wgrad RHT {}; gradient SR {}; last {} "
          "block(s) in bf16)",
          rht ? "on" : "off", sr ? "on" : "off", bf16_last);
  }
  return {};
}

float fp8_max(DType fp8) {
  switch (fp8) {
    case DType::fp8_e4m3: return 448.0f;
    case DType::fp8_e5m2: return 57344.0f;
    default:
      throw std::invalid_argument("fp8_max: expected fp8_e4m3 or fp8_e5m2, got " +
                                  std::string(name(fp8)));
  }
}

namespace {
// The state's tensors are read on every call (they may be module buffers that a checkpoint
// loader fills in place); they must stay fp32.
const Tensor& f32(const Tensor& t) {
  if (t.dtype() != DType::fp32 || !t.is_contiguous()) {
    throw std::logic_error(
        "mixp::amp::Fp8ScalingState: the state tensors must stay contiguous fp32 (got " +
        std::string(name(t.dtype())) + "); do not convert FP8 scaling buffers");
  }
  return t;
}
}  // namespace

Fp8ScalingState::Fp8ScalingState(DType fp8, int64_t history_len, AmaxComputeAlgo algo, int margin)
    : dtype_(fp8), algo_(algo), margin_(margin) {
  (void)fp8_max(fp8);  // validates the dtype
  if (history_len < 1) {
    throw std::invalid_argument(
        fmt::format("Fp8ScalingState: the amax history length must be at least 1, got {}",
                    history_len));
  }
  history_ = zeros({history_len});
  scale_ = ones({1});
  scale_inv_ = ones({1});
}

// Reads go through the element accessors (host access, 3.5 of docs/architecture.md); the
// updates are the backend's fp8_scale_update.
float Fp8ScalingState::scale() const {
  return f32(scale_).item<float>();
}
float Fp8ScalingState::scale_inv() const {
  return f32(scale_inv_).item<float>();
}

float Fp8ScalingState::history(int64_t i) const {
  if (i < 0 || i >= history_len()) {
    throw std::out_of_range(fmt::format("Fp8ScalingState::history: slot {} of {}", i,
                                        history_len()));
  }
  return static_cast<float>(f32(history_).at({i}));
}

std::vector<float> Fp8ScalingState::history() const {
  return f32(history_).to_vector<float>();
}

void Fp8ScalingState::record_amax(float amax) {
  Tensor h = history_, s = scale_, si = scale_inv_;
  backend_for(h, s, si).fp8_scale_update(h, s, si, {.roll = false, .amax = amax});
  history_.bump_version();  // written by a kernel (Storage::version)
}

void Fp8ScalingState::update() {
  prev_scale_ = scale();
  prev_scale_inv_ = scale_inv();
  Tensor h = history_, s = scale_, si = scale_inv_;
  backend_for(h, s, si).fp8_scale_update(h, s, si,
                                         {.roll = true,
                                          .most_recent = algo_ == AmaxComputeAlgo::most_recent,
                                          .fp8_max = fp8_max(dtype_),
                                          .margin = margin_});
  bump_versions();
}

void Fp8ScalingState::reset() {
  NoGradGuard ng;
  history_.fill_(0.0);
  scale_.fill_(1.0);
  scale_inv_.fill_(1.0);
  prev_scale_ = prev_scale_inv_ = 1.0f;
  bump_versions();
}

void Fp8ScalingState::bump_versions() const {
  history_.bump_version();
  scale_.bump_version();
  scale_inv_.bump_version();
}

std::vector<std::pair<std::string, Tensor>> Fp8ScalingState::tensors() const {
  return {{"amax_history", history_}, {"scale", scale_}, {"scale_inv", scale_inv_}};
}

void Fp8ScalingState::load(const std::vector<std::pair<std::string, Tensor>>& entries,
                           const std::string& prefix) {
  std::vector<std::pair<Tensor, Tensor>> plan;  // (source, destination)
  for (const auto& [name, dst] : tensors()) {
    const std::string full = prefix + name;
    auto it = std::find_if(entries.begin(), entries.end(),
                           [&](const auto& e) { return e.first == full; });
    if (it == entries.end()) {
      throw std::invalid_argument(fmt::format(
          "FP8 scaling state '{}' is missing; the checkpoint was not trained with this FP8 "
          "recipe and layer selection",
          full));
    }
    const Tensor& src = it->second;
    if (!src.defined() || !src.is_floating_point()) {
      throw std::invalid_argument(
          fmt::format("FP8 scaling state '{}' must be a floating tensor", full));
    }
    if (src.shape() != dst.shape()) {
      throw std::invalid_argument(fmt::format(
          "FP8 scaling state '{}' has shape {} but this model's is {}{}", full, src.shape().str(),
          dst.shape().str(), name == "amax_history" ? " (the amax history length differs)" : ""));
    }
    plan.emplace_back(src, dst);
  }
  NoGradGuard ng;
  for (auto& [src, dst] : plan) dst.copy_(src);
  prev_scale_ = scale();
  prev_scale_inv_ = scale_inv();
}

}  // namespace mixp::amp
