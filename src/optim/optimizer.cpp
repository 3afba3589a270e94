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
#include "mixp/tensor/factories.h"
#include "mixp/tensor/generator.h"
#include "parallel_loop.h"

namespace mixp::optim {

namespace {

// The dtype the update runs in for a parameter of dtype `d`.
DType working_dtype(DType d) {
  return d == DType::fp64 ? DType::fp64 : DType::fp32;
}

bool narrower_than_fp32(DType d) {
  return d != DType::fp32 && d != DType::fp64;
}

constexpr size_t kMaxSlots = 8;
// Elements per chunk of the chunked update (fp32 scratch per thread: a few times 16 KiB).
constexpr int64_t kChunk = 4096;
// Elements per chunk of an fp32 update that also rewrites a weight shadow: w, g and two moments
// (4 x 4 KiB) plus the 16-bit shadow stay in L1 between the update and the narrowing (perf: 4096
// left about half of the narrowing's memory stalls).
constexpr int64_t kShadowChunk = 1024;

// body(c) for every chunk c of a parameter of n elements, in parallel when n pays for it (the grain
// of parallel_loop). The update kernels see one chunk at a time (serial inside: len < the grain).
template <class F>
void for_each_chunk(int64_t n, F&& body, int64_t chunk = kChunk) {
  const int64_t chunks = (n + chunk - 1) / chunk;
  if (n < kOptimParallelGrain || omp_get_max_threads() == 1) {
    for (int64_t c = 0; c < chunks; ++c) body(c);
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) body(c);
  }
}

// The weight shadow (tensor.h) the step of `st` rewrites, as bytes, or nullptr. Only an fp32
// parameter's current shadow that nothing else holds (a retained graph or a user's copy still
// reads it) is rewritten, and only while shadows are on; any other shadow is dropped here (a stale
// one is useless, autocast attaches a fresh one at its next cast).
unsigned char* shadow_to_rewrite(ParamState& st) {
  TensorImpl& w = *st.param.impl();
  if (!w.shadow.storage) return nullptr;
  if (st.param.dtype() == DType::fp32 && weight_shadows_enabled() && shadow_is_current(w) &&
      w.shadow.storage.use_count() == 1) {
    return static_cast<unsigned char*>(w.shadow.storage->data);
  }
  w.shadow = WeightShadow{};
  return nullptr;
}

// Rounds the updated fp32 values [lo, lo + len) into the shadow exactly as autocast casts.
void write_shadow(const ParamState& st, unsigned char* shadow, const float* w, int64_t lo,
                  int64_t len) {
  const DType sd = st.param.impl()->shadow.dtype;
  convert_f32_to(sd, {w, static_cast<size_t>(len)}, shadow + lo * traits(sd).storage_bytes,
                 {.round = kShadowRound, .overflow = kShadowOverflow});
}

// After a step wrote st.param: a new version (stale copies of the old values are never used
// again), which the shadow shares when the step rewrote it too.
void finish_param_write(ParamState& st, bool shadow_rewritten) {
  st.param.bump_version();
  if (shadow_rewritten) st.param.impl()->shadow.version = st.param.version();
}

}  // namespace

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
      backend().copy(st.master, p.detach());  // widening: exact
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

uint64_t Optimizer::write_back_seed(size_t index, int64_t step) const {
  // A counter-based stream: independent of thread count and of which other parameters had
  // gradients, and a pure function of (seed, index, step) so that a resumed run rounds the same.
  return Generator::splitmix64(
      precision_.seed ^ Generator::splitmix64(static_cast<uint64_t>(index) * 0x100000001B3ULL +
                                              static_cast<uint64_t>(step)));
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
  const DType w = working_dtype(st.param.dtype());
  const bool narrow_states = !st.slots.empty() && st.slots[0].dtype() != w;
  const bool narrow_param = st.param.dtype() != w;
  if (narrow_states || st.comp.defined() || (narrow_param && !st.master.defined())) {
    // Gradient: contiguous, and fp32 or an element-wise format the chunks widen.
    Tensor g = g0;
    if (!g.is_contiguous() || !is_elementwise_float(g.dtype())) {
      if (!st.grad_work.defined()) st.grad_work = empty(st.param.shape(), {.dtype = w});
      backend().copy(st.grad_work, g0);
      g = st.grad_work;
    }
    st.step += 1;
    begin_update(st.step);
    unsigned char* shadow = shadow_to_rewrite(st);
    step_param_chunked(index, g, shadow);
    finish_param_write(st, shadow != nullptr);
    return;
  }
  // Working values: the parameter itself or its master copy.
  const Tensor values = narrow_param ? st.master : st.param;
  // Gradient in the working dtype, contiguous.
  Tensor g = g0;
  if (g.dtype() != w || !g.is_contiguous()) {
    if (!st.grad_work.defined()) st.grad_work = empty(st.param.shape(), {.dtype = w});
    backend().copy(st.grad_work, g0);
    g = st.grad_work;
  }
  st.step += 1;
  begin_update(st.step);
  const int64_t n = st.param.numel();
  unsigned char* shadow = nullptr;
  if (w == DType::fp64) {
    double* slots[kMaxSlots];
    for (size_t k = 0; k < st.slots.size(); ++k)
      slots[k] = static_cast<double*>(st.slots[k].data_ptr());
    update(static_cast<double*>(values.data_ptr()), static_cast<const double*>(g.data_ptr()), slots,
           n, st.step);
  } else {
    float* slots[kMaxSlots];
    for (size_t k = 0; k < st.slots.size(); ++k)
      slots[k] = static_cast<float*>(st.slots[k].data_ptr());
    float* wv = static_cast<float*>(values.data_ptr());
    const float* gv = static_cast<const float*>(g.data_ptr());
    shadow = shadow_to_rewrite(st);
    if (!shadow) {
      update(wv, gv, slots, n, st.step);
    } else {
      // Chunk by chunk, so that each chunk of new values is rounded into the shadow while it is
      // still in L1 (autocast would read the whole weight again from memory to cast it).
      for_each_chunk(n, [&](int64_t c) {
        const int64_t lo = c * kShadowChunk, len = std::min(kShadowChunk, n - lo);
        float* chunk_slots[kMaxSlots];
        for (size_t k = 0; k < st.slots.size(); ++k) chunk_slots[k] = slots[k] + lo;
        update(wv + lo, gv + lo, chunk_slots, len, st.step);
        write_shadow(st, shadow, wv + lo, lo, len);
      }, kShadowChunk);
    }
  }
  if (!values.is_same(st.param)) write_back(index, values);
  finish_param_write(st, shadow != nullptr);
}

void Optimizer::step_param_chunked(size_t index, const Tensor& grad, unsigned char* shadow) {
  ParamState& st = params_[index];
  const int64_t n = st.param.numel();
  const DType pd = st.param.dtype(), gd = grad.dtype();
  const bool narrow_param = pd != DType::fp32;
  const bool has_master = st.master.defined();
  const bool kahan = st.comp.defined();
  const size_t nslots = st.slots.size();
  const DType sd = nslots > 0 ? st.slots[0].dtype() : DType::fp32;
  const bool narrow_states = sd != DType::fp32;
  const uint64_t seed = write_back_seed(index, st.step);
  const ConvertOptions param_round{
      .round = precision_.write_back, .overflow = precision_.overflow, .seed = seed};
  // States round to nearest-even, or stochastically (one stream per slot) when the write-back
  // does; a state is never truncated.
  const Round state_round =
      precision_.write_back == Round::stochastic ? Round::stochastic : Round::nearest_even;
  auto* pbits = static_cast<unsigned char*>(st.param.data_ptr());
  const size_t pes = st.param.element_size();
  float* master = has_master ? static_cast<float*>(st.master.data_ptr()) : nullptr;
  auto* gbits = static_cast<const unsigned char*>(grad.data_ptr());
  const size_t ges = grad.element_size();
  auto* cbits = kahan ? static_cast<unsigned char*>(st.comp.data_ptr()) : nullptr;
  unsigned char* sbits[kMaxSlots];
  for (size_t k = 0; k < nslots; ++k)
    sbits[k] = static_cast<unsigned char*>(st.slots[k].data_ptr());
  const size_t ses = nslots > 0 ? st.slots[0].element_size() : 4;

  auto body = [&](int64_t c) {
    // Scratch: w, g, old p, comp/y, new p, then one per slot.
    thread_local std::vector<float> scratch;
    scratch.resize(static_cast<size_t>((5 + kMaxSlots) * kChunk));
    const int64_t lo = c * kChunk, len = std::min(kChunk, n - lo);
    const size_t ulen = static_cast<size_t>(len);
    float* buf_w = scratch.data();
    float* buf_g = buf_w + kChunk;
    float* buf_old = buf_g + kChunk;
    float* buf_c = buf_old + kChunk;
    float* buf_new = buf_c + kChunk;
    float* w;
    if (master) {
      w = master + lo;
    } else if (narrow_param) {
      w = buf_w;
      convert_to_f32(pd, pbits + lo * pes, {w, ulen});
    } else {
      w = reinterpret_cast<float*>(pbits) + lo;  // fp32 parameter, narrow states
    }
    if (kahan) std::copy(w, w + len, buf_old);
    const float* gp;
    if (gd == DType::fp32) {
      gp = reinterpret_cast<const float*>(gbits) + lo;
    } else {
      convert_to_f32(gd, gbits + lo * ges, {buf_g, ulen});
      gp = buf_g;
    }
    float* slots[kMaxSlots];
    for (size_t k = 0; k < nslots; ++k) {
      if (narrow_states) {
        slots[k] = buf_new + (1 + k) * kChunk;
        convert_to_f32(sd, sbits[k] + lo * ses, {slots[k], ulen});
      } else {
        slots[k] = reinterpret_cast<float*>(sbits[k]) + lo;
      }
    }
    update(w, gp, slots, len, st.step);
    for (size_t k = 0; k < nslots && narrow_states; ++k) {
      convert_f32_to(sd, {slots[k], ulen}, sbits[k] + lo * ses,
                     {.round = state_round,
                      .overflow = Overflow::ieee,
                      .seed = Generator::splitmix64(seed + 0x9E3779B97F4A7C15ULL * (k + 1)),
                      .offset = static_cast<uint64_t>(lo)});
    }
    if (!narrow_param) {
      if (shadow) write_shadow(st, shadow, w, lo, len);
      return;
    }
    ConvertOptions pr = param_round;
    pr.offset = static_cast<uint64_t>(lo);
    if (!kahan) {
      convert_f32_to(pd, {w, ulen}, pbits + lo * pes, pr);
      return;
    }
    // Kahan: y = (w_new - p) + comp; p' = round(p + y); comp' = y - (p' - p).
    convert_to_f32(pd, cbits + lo * pes, {buf_c, ulen});
    for (int64_t i = 0; i < len; ++i) {
      const float y = (w[i] - buf_old[i]) + buf_c[i];
      buf_c[i] = y;
      w[i] = buf_old[i] + y;
    }
    convert_f32_to(pd, {w, ulen}, pbits + lo * pes, pr);
    convert_to_f32(pd, pbits + lo * pes, {buf_new, ulen});
    for (int64_t i = 0; i < len; ++i) {
      const float y = buf_c[i];
      // A non-finite parameter has no meaningful remainder; keep the buffer finite.
      const float r = y - (buf_new[i] - buf_old[i]);
      buf_c[i] = std::isfinite(r) ? r : 0.0f;
    }
    convert_f32_to(pd, {buf_c, ulen}, cbits + lo * pes,
                   {.round = Round::nearest_even, .overflow = Overflow::saturate});
  };
  for_each_chunk(n, body);
}

void Optimizer::write_back(size_t index, const Tensor& from) {
  ParamState& st = params_[index];
  Tensor dst = st.param.detach();  // same storage
  backend().convert(dst, from, precision_.write_back, precision_.overflow,
                    write_back_seed(index, st.step));
}

void Optimizer::reset_masters_from_params() {
  NoGradGuard ng;
  for (auto& p : params_) {
    if (p.master.defined()) {
      backend().copy(p.master, p.param.detach());
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
