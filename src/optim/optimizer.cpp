#include "mixp/optim/optimizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <vector>

#include "mixp/autograd/grad_mode.h"
#include "mixp/backend/backend.h"
#include "mixp/format/convert.h"
#include "mixp/optim/weight_shadow_hook.h"
#include "mixp/tensor/factories.h"
#include "mixp/tensor/generator.h"

namespace mixp::optim {

namespace {

// The dtype the update runs in for a parameter of dtype `d`.
DType working_dtype(DType d) {
  return d == DType::fp64 ? DType::fp64 : DType::fp32;
}

bool narrower_than_fp32(DType d) {
  return d != DType::fp32 && d != DType::fp64;
}

constexpr size_t kMaxSlots = 8;  // of the backend's fused update (optimizer_update)

WeightShadowHook* g_shadow_hook = nullptr;  // amp's cache, registered while libmixp loads

// The weight shadow (optim/weight_shadow_hook.h) the step of `st` rewrites, or an undefined
// tensor; the hook drops one that may not be rewritten.
Tensor shadow_to_rewrite(ParamState& st) {
  return g_shadow_hook ? g_shadow_hook->take(st.param) : Tensor();
}

// After a step wrote st.param: a new version (stale copies of the old values are never used
// again), which the shadow shares when the step rewrote it too.
void finish_param_write(ParamState& st, bool shadow_rewritten) {
  st.param.bump_version();
  if (shadow_rewritten) g_shadow_hook->rewritten(st.param);
}

}  // namespace

void set_weight_shadow_hook(WeightShadowHook* hook) {
  g_shadow_hook = hook;
}
WeightShadowHook* weight_shadow_hook() {
  return g_shadow_hook;
}

const Tensor* StateDict::find_tensor(const std::string& name) const {
  for (const auto& [n, t] : tensors) {
    if (n == name) return &t;
  }
  return nullptr;
}

const double* StateDict::find_scalar(const std::string& name) const {
  for (const auto& [n, v] : scalars) {
    if (n == name) return &v;
  }
  return nullptr;
}

NamedTensors Optimizer::name_by_index(const std::vector<Tensor>& params) {
  NamedTensors out;
  out.reserve(params.size());
  for (size_t i = 0; i < params.size(); ++i) out.emplace_back(std::to_string(i), params[i]);
  return out;
}

Optimizer::Optimizer(NamedTensors params, double lr, const PrecisionOptions& precision,
                     std::vector<std::string> slot_names)
    : slot_names_(std::move(slot_names)), precision_(precision), lr_(0.0) {
  set_lr(lr);
  if (slot_names_.size() > kMaxSlots) throw std::logic_error("mixp::optim: too many state slots");
  if (precision.write_back != Round::nearest_even && precision.write_back != Round::stochastic &&
      precision.write_back != Round::toward_zero) {
    throw std::invalid_argument("mixp::optim: unsupported write-back rounding");
  }
  if (precision.state_dtype != DType::fp32 && precision.state_dtype != DType::bf16) {
    throw std::invalid_argument(
        fmt::format("mixp::optim: optimizer states can be stored in fp32 or bf16, not {}",
                    mixp::name(precision.state_dtype)));
  }
  if (precision.kahan && precision.master_weights) {
    throw std::invalid_argument(
        "mixp::optim: Kahan compensation replaces fp32 master weights (it keeps the rounding "
        "error of low-precision parameters in a 16-bit buffer instead); set master_weights = "
        "false to use it");
  }
  std::map<std::string, int> names;
  std::vector<const TensorImpl*> seen;
  NoGradGuard ng;
  for (auto& [name, p] : params) {
    if (!p.defined())
      throw std::invalid_argument(fmt::format("mixp::optim: parameter '{}' is undefined", name));
    if (!p.is_floating_point()) {
      throw std::invalid_argument(fmt::format(
          "mixp::optim: parameter '{}' has dtype {}; only floating parameters can be optimized",
          name, mixp::name(p.dtype())));
    }
    if (!p.is_contiguous()) {
      throw std::invalid_argument(fmt::format(
          "mixp::optim: parameter '{}' is not contiguous; pass the leaf tensor, not a view", name));
    }
    if (!names.emplace(name, 0).second)
      throw std::invalid_argument(
          fmt::format("mixp::optim: parameter name '{}' is given twice", name));
    for (const TensorImpl* s : seen) {
      if (s == p.impl())
        throw std::invalid_argument(
            fmt::format("mixp::optim: parameter '{}' is given twice (same tensor)", name));
    }
    seen.push_back(p.impl());
    ParamState st;
    st.name = name;
    st.param = p;
    const DType w = working_dtype(p.dtype());
    if (narrower_than_fp32(p.dtype()) && precision.master_weights) {
      st.master = empty(p.shape(), {.dtype = DType::fp32});
      backend_for(st.master, p).copy(st.master, p.detach());  // widening: exact
    }
    if (narrower_than_fp32(p.dtype()) && !is_elementwise_float(p.dtype())) {
      throw std::invalid_argument(fmt::format(
          "mixp::optim: parameter '{}' has dtype {}; low-precision parameters must be an "
          "element-wise float format (bf16, fp16, fp8_e4m3, fp8_e5m2, tf32)",
          name, mixp::name(p.dtype())));
    }
    if (narrower_than_fp32(p.dtype()) && precision.kahan && !precision.master_weights)
      st.comp = zeros(p.shape(), {.dtype = p.dtype()});
    const DType sd = w == DType::fp64 ? DType::fp64 : precision.state_dtype;
    for (size_t k = 0; k < slot_names_.size(); ++k)
      st.slots.push_back(zeros(p.shape(), {.dtype = sd}));
    params_.push_back(std::move(st));
  }
}

Optimizer::~Optimizer() = default;

void Optimizer::set_lr(double lr) {
  if (!(lr >= 0.0) || !std::isfinite(lr))
    throw std::invalid_argument(
        fmt::format("mixp::optim: learning rate must be finite and >= 0, got {}", lr));
  lr_ = lr;
}

std::vector<Tensor> Optimizer::parameters() const {
  std::vector<Tensor> out;
  for (const auto& p : params_) out.push_back(p.param);
  return out;
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard ng;
  for (auto& p : params_) {
    if (set_to_none) {
      p.param.set_grad(Tensor());
    } else if (Tensor g = p.param.grad(); g.defined()) {
      g.zero_();
    }
  }
}

void Optimizer::step() {
  NoGradGuard ng;
  for (size_t i = 0; i < params_.size(); ++i) step_param(i);
  ++steps_;
}

void Optimizer::step_parameter(size_t index) {
  if (index >= params_.size()) {
    throw std::out_of_range(fmt::format("mixp::optim::step_parameter: index {} of {} parameters",
                                        index, params_.size()));
  }
  NoGradGuard ng;
  step_param(index);
}

uint64_t Optimizer::write_back_seed(size_t index, int64_t step) const {
  // A counter-based stream: independent of thread count and of which other parameters had
  // gradients, and a pure function of (seed, index, step) so that a resumed run rounds the same.
  const uint64_t stream = streams_.empty() ? static_cast<uint64_t>(index) : streams_.at(index);
  return Generator::splitmix64(
      precision_.seed ^
      Generator::splitmix64(stream * 0x100000001B3ULL + static_cast<uint64_t>(step)));
}

void Optimizer::set_write_back_streams(std::vector<uint64_t> streams,
                                       std::vector<uint64_t> offsets) {
  if (streams.size() != params_.size() || (!offsets.empty() && offsets.size() != params_.size())) {
    throw std::invalid_argument(
        fmt::format("mixp::optim: {} write-back streams and {} offsets for {} parameters",
                    streams.size(), offsets.size(), params_.size()));
  }
  streams_ = std::move(streams);
  offsets_ = std::move(offsets);
}

void Optimizer::step_param(size_t index) {
  ParamState& st = params_[index];
  const Tensor g0 = st.param.grad();
  if (!g0.defined()) return;
  if (!(g0.shape() == st.param.shape())) {
    throw std::logic_error(
        fmt::format("mixp::optim: gradient of '{}' has shape {} but the parameter {}", st.name,
                    g0.shape().str(), st.param.shape().str()));
  }
  Backend& be = backend_for(st.param, g0);
  const DType w = working_dtype(st.param.dtype());
  const bool narrow_states = !st.slots.empty() && st.slots[0].dtype() != w;
  const bool narrow_param = st.param.dtype() != w;
  ParamUpdate u;
  u.slots = st.slots;
  if (narrow_states || st.comp.defined() || (narrow_param && !st.master.defined())) {
    // The update through fp32 chunks: parameters narrower than fp32 without a master, narrow
    // states, Kahan compensation. Gradient: contiguous, and fp32 or an element-wise format the
    // chunks widen.
    Tensor g = g0;
    if (!g.is_contiguous() || !is_elementwise_float(g.dtype())) {
      if (!st.grad_work.defined()) st.grad_work = empty(st.param.shape(), {.dtype = w});
      be.copy(st.grad_work, g0);
      g = st.grad_work;
    }
    st.step += 1;
    u.chunked = true;
    u.values = st.param;
    u.grad = g;
    u.master = st.master;
    u.comp = st.comp;
    u.shadow = shadow_to_rewrite(st);
    u.write_back = precision_.write_back;
    u.overflow = precision_.overflow;
    u.seed = write_back_seed(index, st.step);
    u.offset = offsets_.empty() ? 0 : offsets_[index];
    u.step = st.step;
    be.optimizer_update(u, update_rule(st.step));
    finish_param_write(st, u.shadow.defined());
    return;
  }
  // Working values: the parameter itself or its master copy.
  const Tensor values = narrow_param ? st.master : st.param;
  // Gradient in the working dtype, contiguous.
  Tensor g = g0;
  if (g.dtype() != w || !g.is_contiguous()) {
    if (!st.grad_work.defined()) st.grad_work = empty(st.param.shape(), {.dtype = w});
    be.copy(st.grad_work, g0);
    g = st.grad_work;
  }
  st.step += 1;
  u.values = values;
  u.grad = g;
  if (w == DType::fp32) u.shadow = shadow_to_rewrite(st);
  u.step = st.step;
  be.optimizer_update(u, update_rule(st.step));
  if (!values.is_same(st.param)) write_back(index, values);
  finish_param_write(st, u.shadow.defined());
}

void Optimizer::write_back(size_t index, const Tensor& from) {
  ParamState& st = params_[index];
  Tensor dst = st.param.detach();  // same storage
  const uint64_t offset = offsets_.empty() ? 0 : offsets_[index];
  if (offset != 0 && precision_.write_back == Round::stochastic) {
    // A ZeRO 3 shard's rows (set_write_back_streams): the draws of its place in the whole
    // parameter, which the backends' convert (element 0 first) cannot be told. Device memory
    // (a GPU's) is rounded on the host, a copy there and back: only masters with stochastic
    // write-back take this path (bf16-pure's fused update is told the offset).
    if (from.dtype() != DType::fp32) {
      throw std::logic_error("mixp::optim: a write-back stream offset needs fp32 masters");
    }
    // Rounded on the host, into the parameter itself when it is contiguous CPU memory, else
    // into a host copy written back by the backend.
    const bool in_place = dst.device().is_cpu() && dst.is_contiguous();
    const Tensor src = from.to(Device::cpu()).contiguous();
    Tensor out =
        in_place ? dst : empty(dst.shape(), {.dtype = dst.dtype(), .device = Device::cpu()});
    convert_f32_to(out.dtype(), std::span<const float>(src.data<float>(), size_t(src.numel())),
                   out.data_ptr(),
                   {.round = precision_.write_back,
                    .overflow = precision_.overflow,
                    .seed = write_back_seed(index, st.step),
                    .offset = offset});
    if (!in_place) {
      const Tensor back = out.to(dst.device());
      backend_for(dst, back).copy(dst, back);
    }
    return;
  }
  backend_for(dst, from).convert(dst, from, precision_.write_back, precision_.overflow,
                                 write_back_seed(index, st.step));
}

void Optimizer::reset_masters_from_params() {
  NoGradGuard ng;
  for (auto& p : params_) {
    if (p.master.defined()) {
      backend_for(p.master, p.param).copy(p.master, p.param.detach());
      p.master.bump_version();
    }
  }
}

StateDict Optimizer::state_dict() const {
  NoGradGuard ng;
  StateDict sd;
  sd.scalars.emplace_back("step", static_cast<double>(steps_));
  sd.scalars.emplace_back("lr", lr_);
  for (const auto& p : params_) {
    for (size_t k = 0; k < slot_names_.size(); ++k)
      sd.tensors.emplace_back(p.name + "." + slot_names_[k], p.slots[k].clone());
    if (p.master.defined()) sd.tensors.emplace_back(p.name + ".master", p.master.clone());
    if (p.comp.defined()) sd.tensors.emplace_back(p.name + ".kahan", p.comp.clone());
    sd.scalars.emplace_back(p.name + ".step", static_cast<double>(p.step));
  }
  return sd;
}

void Optimizer::load_state_dict(const StateDict& sd) {
  const StateDict mine = state_dict();  // the names and shapes this optimizer needs
  std::map<std::string, const Tensor*> given;
  for (const auto& [name, t] : sd.tensors) {
    if (!given.emplace(name, &t).second)
      throw std::invalid_argument(
          fmt::format("mixp::optim::load_state_dict: '{}' is given twice", name));
  }
  auto fail = [&](const std::string& what) {
    throw std::invalid_argument(
        fmt::format("mixp::optim::load_state_dict ({}): {}; the state belongs to a different model "
                    "or optimizer",
                    name(), what));
  };
  for (const auto& [name, t] : mine.tensors) {
    auto it = given.find(name);
    if (it == given.end())
      fail(fmt::format("missing tensor '{}' (shape {})", name, t.shape().str()));
    if (!it->second->defined() || !(it->second->shape() == t.shape())) {
      fail(fmt::format("tensor '{}' has shape {}, expected {}", name,
                       it->second->defined() ? it->second->shape().str() : "(undefined)",
                       t.shape().str()));
    }
    if (!it->second->is_floating_point())
      fail(fmt::format("tensor '{}' is not floating point", name));
  }
  if (given.size() != mine.tensors.size()) {
    for (const auto& [name, t] : given) {
      if (!mine.find_tensor(name)) fail(fmt::format("unexpected tensor '{}'", name));
    }
  }
  for (const auto& [name, v] : mine.scalars) {
    const double* s = sd.find_scalar(name);
    if (!s) fail(fmt::format("missing scalar '{}'", name));
    const bool is_count = name != "lr";
    if (!std::isfinite(*s) || *s < 0 || (is_count && *s != std::floor(*s)))
      fail(fmt::format("scalar '{}' = {} is invalid", name, *s));
  }
  // Everything checked: copy in.
  NoGradGuard ng;
  steps_ = static_cast<int64_t>(*sd.find_scalar("step"));
  lr_ = *sd.find_scalar("lr");
  for (size_t i = 0; i < params_.size(); ++i) {
    ParamState& p = params_[i];
    for (size_t k = 0; k < slot_names_.size(); ++k)
      p.slots[k].copy_(*given.at(p.name + "." + slot_names_[k]));
    if (p.master.defined()) p.master.copy_(*given.at(p.name + ".master"));
    if (p.comp.defined()) p.comp.copy_(*given.at(p.name + ".kahan"));
    p.step = static_cast<int64_t>(*sd.find_scalar(p.name + ".step"));
  }
}

}  // namespace mixp::optim
