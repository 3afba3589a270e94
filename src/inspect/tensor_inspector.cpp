// TensorInspector (tensor_inspector.h): statistics per module and role at the chosen steps.
#include "mixp/inspect/tensor_inspector.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <span>

#include "mixp/amp/fp8_linear.h"
#include "mixp/autograd/grad_mode.h"
#include "mixp/backend/kernel_observer.h"
#include "mixp/io/atomic_file.h"
#include "mixp/nn/linear.h"
#include "mixp/optim/optimizer.h"
#include "ops/dispatch.h"

namespace mixp::inspect {
namespace {

// JSON has no inf/NaN: such a statistic is written as null.
nlohmann::ordered_json num(double v) {
  return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
}

// "blocks.0.attn.qkv.weight" -> {"blocks.0.attn.qkv", "weight"}.
std::pair<std::string, std::string> split_param(const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return {"", name};
  return {name.substr(0, dot), name.substr(dot + 1)};
}

std::string file_safe(std::string s) {
  for (char& c : s)
    if (c == '/' || c == ' ') c = '_';
  return s;
}

}  // namespace

std::string to_json_line(const StatRecord& r) {
  nlohmann::ordered_json j;
  j["step"] = r.step;
  j["module"] = r.module;
  j["kind"] = r.kind;
  j["role"] = to_string(r.role);
  j["tensor"] = r.tensor;
  j["call"] = r.call;
  j["dtype"] = std::string(name(r.dtype));
  j["shape"] = std::vector<int64_t>(r.shape.begin(), r.shape.end());
  j["loss_scale"] = r.loss_scale;
  const TensorStats& s = r.stats;
  j["numel"] = s.numel;
  j["amax"] = num(s.amax);
  j["amin_nz"] = num(s.amin_nz);
  j["dynamic_range"] = num(s.dynamic_range);
  j["rms"] = num(s.rms);
  j["nan"] = s.nan;
  j["inf"] = s.inf;
  j["zeros"] = s.zeros;
  nlohmann::ordered_json f = nlohmann::ordered_json::object();
  for (const FormatStats& fs : s.formats) {
    f[to_string(fs.format)] = {{"overflow", s.fraction(fs.overflow)},
                               {"underflow", s.fraction(fs.underflow)},
                               {"subnormal", s.fraction(fs.subnormal)},
                               {"mse", num(fs.mse)},
                               {"overflow_count", fs.overflow},
                               {"underflow_count", fs.underflow},
                               {"subnormal_count", fs.subnormal}};
  }
  j["formats"] = f;
  if (r.block) {
    const BlockScaledStats& b = *r.block;
    j["block"] = {{"format", std::string(to_string(b.options.scheme))},
                  {"tile", fmt::format("{}x{}", b.options.tile_rows, b.tile_cols)},
                  {"blocks", b.blocks},
                  {"underflow", b.underflow},
                  {"saturated", b.saturated},
                  {"blocks_with_underflow", b.blocks_with_underflow},
                  {"blocks_with_saturation", b.blocks_with_saturation},
                  {"scale_saturated", b.scale_saturated},
                  {"share_scale_saturated", b.share_scale_saturated()},
                  {"mse", num(b.mse)}};
  }
  if (!r.dump.empty()) j["dump"] = r.dump;
  return j.dump();
}

TensorInspector::TensorInspector(InspectSpec spec) : spec_(std::move(spec)) {
  if (!spec_.dump.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(spec_.dump, ec);
    if (ec) {
      throw InspectError(fmt::format("--inspect dump={}: cannot create the folder: {}",
                                     spec_.dump.string(), ec.message()));
    }
  }
  try {
    file_ = std::make_unique<LineFile>(spec_.out, /*append=*/false, "--inspect out=");
  } catch (const IoError& e) {
    throw InspectError(e.what());
  }
}

TensorInspector::~TensorInspector() {
  detach();
}

void TensorInspector::attach(nn::Module& model) {
  tracker_.attach(model, [this](const std::string& path, nn::Module& m, Tensor y) {
    return on_output(path, m, std::move(y));
  });
  model_ = &model;
  fp8_layers_.clear();
  if (spec_.wants(Role::fp8_operand)) {
    amp::set_fp8_operand_observer(
        [this](const amp::Fp8LinearMeta& meta, amp::Fp8Role role, const Tensor& operand,
               float scale) { record_fp8_operand(meta, role, operand, scale); });
    amp::set_block_operand_observer(
        [this](const amp::Fp8LinearMeta& meta, std::string_view tensor, const Tensor& operand,
               const BlockScaledOptions& o) { record_block_operand(meta, tensor, operand, o); });
    observing_fp8_ = true;
  }
}

void TensorInspector::detach() {
  tracker_.detach();
  if (observing_fp8_) {
    amp::set_fp8_operand_observer({});
    amp::set_block_operand_observer({});
  }
  observing_fp8_ = false;
  model_ = nullptr;
}

const std::pair<std::string, std::string>* TensorInspector::fp8_layer(
    const amp::Fp8LinearMeta* meta) {
  auto it = fp8_layers_.find(meta);
  if (it == fp8_layers_.end() && model_) {
    fp8_layers_.clear();
    for (auto& [path, m] : model_->named_modules()) {
      if (auto* lin = dynamic_cast<nn::Linear*>(m)) {
        if (auto mp = amp::fp8_meta(*lin)) fp8_layers_[mp.get()] = {path, lin->kind()};
      }
    }
    it = fp8_layers_.find(meta);
  }
  return it == fp8_layers_.end() ? nullptr : &it->second;
}

void TensorInspector::record_fp8_operand(const amp::Fp8LinearMeta& meta, amp::Fp8Role role,
                                         const Tensor& operand, float scale) {
  if (!active_ || !spec_.wants(Role::fp8_operand)) return;
  const auto* layer = fp8_layer(&meta);
  if (!layer || !spec_.module_selected(layer->first)) return;
  const std::string tensor(amp::to_string(role));
  const int64_t call = calls_[layer->first + "#fp8." + tensor]++;
  const StatFormat f = meta.recipe().dtype(role) == DType::fp8_e5m2 ? StatFormat::fp8_e5m2
                                                                     : StatFormat::fp8_e4m3;
  record_as(layer->first, layer->second, Role::fp8_operand, tensor, operand, scale, call,
            std::span<const StatFormat>(&f, 1), scale);
}

void TensorInspector::record_block_operand(const amp::Fp8LinearMeta& meta,
                                           std::string_view tensor, const Tensor& operand,
                                           const BlockScaledOptions& options) {
  if (!active_ || !spec_.wants(Role::fp8_operand)) return;
  const auto* layer = fp8_layer(&meta);
  if (!layer || !spec_.module_selected(layer->first)) return;
  KernelPhaseScope phase(KernelPhase::other);  // the inspector's own work
  StatRecord r;
  r.step = step_;
  r.module = layer->first;
  r.kind = layer->second;
  r.role = Role::fp8_operand;
  r.tensor = std::string(tensor);
  r.call = calls_[layer->first + "#block." + r.tensor]++;
  r.dtype = operand.dtype();
  r.shape = operand.shape();
  const int64_t rows = operand.size(0), cols = operand.size(1);
  const std::vector<float> v = values_as_fp32(operand, 1.0);
  r.stats = tensor_stats(v, cols, {});
  if (r.stats.nan == 0 && r.stats.inf == 0) {
    BlockScaledStats b = block_scaled_stats(v, rows, cols, options);
    b.block_underflow = {};  // the record keeps the totals
    b.block_saturated = {};
    b.block_scale_saturated = {};
    r.block = std::move(b);
  }
  write(std::move(r), &v);
}

void TensorInspector::begin_step(int64_t step, double loss_scale) {
  step_ = step;
  loss_scale_ = loss_scale;
  active_ = spec_.step_selected(step);
  tracker_.clear_nodes();
  calls_.clear();
}

Tensor TensorInspector::on_output(const std::string& path, nn::Module& m, Tensor y) {
  if (!active_ || !y.defined() || !y.is_floating_point() || !spec_.module_selected(path)) return y;
  // A forward run again in backward is a checkpointed segment's recomputation: its activations
  // were recorded in the forward; only the gradient probe belongs here (the gradient flows
  // through the recomputed graph).
  const bool recompute = kernel_phase() == KernelPhase::backward;
  int64_t call = 0;
  if (!recompute) {
    call = calls_[path]++;
    if (spec_.wants(Role::activation))
      record(path, m.kind(), Role::activation, "output", y, 1.0, call);
  } else {
    call = std::max<int64_t>(0, calls_[path] - 1);
  }
  if (spec_.wants(Role::activation_grad) && y.requires_grad() && GradMode::is_enabled()) {
    // A pass-through node: its backward sees the gradient of this output, records it, and hands
    // it on unchanged (same dtype, same tensor).
    Tensor out = detail::raw_view(y, y.shape(), y.strides(), y.storage_offset());
    const DType gd = detail::grad_dtype_of(y.dtype());
    const int64_t step = step_;
    std::string kind = m.kind();
    detail::record(OpId::contiguous, gd, {&y}, {&out},
                   [this, path, kind, step, call](BackwardContext& ctx) {
                     if (step_ == step && active_)
                       record(path, kind, Role::activation_grad, "output", ctx.grad(0), 1.0, call);
                     ctx.grad_inputs[0] = ctx.grad(0);
                   });
    return out;
  }
  return y;
}

void TensorInspector::record(const std::string& module, const std::string& kind, Role role,
                             const std::string& tensor, const Tensor& t, double scale,
                             int64_t call) {
  record_as(module, kind, role, tensor, t, scale, call, spec_.formats, loss_scale_);
}

void TensorInspector::record_as(const std::string& module, const std::string& kind, Role role,
                                const std::string& tensor, const Tensor& t, double scale,
                                int64_t call, std::span<const StatFormat> formats,
                                double record_scale) {
  if (!t.defined() || !t.is_floating_point()) return;
  KernelPhaseScope phase(KernelPhase::other);  // the inspector's own conversions
  StatRecord r;
  r.step = step_;
  r.module = module;
  r.kind = kind;
  r.role = role;
  r.tensor = tensor;
  r.call = call;
  r.dtype = t.dtype();
  r.shape = t.shape();
  r.loss_scale = record_scale;
  const std::vector<float> v = values_as_fp32(t, scale);
  r.stats = tensor_stats(v, t.dim() > 0 ? t.size(-1) : 1, formats);
  write(std::move(r), &v);
}

void TensorInspector::write(StatRecord r, const std::vector<float>* values) {
  if (!spec_.dump.empty() && values) {
    r.dump = file_safe(fmt::format("{}.{}.{}{}{}{}.f32", r.step,
                                   r.module.empty() ? "model" : r.module, to_string(r.role),
                                   r.tensor.empty() ? "" : ".", r.tensor,
                                   r.call > 0 ? fmt::format(".{}", r.call) : ""));
    const std::filesystem::path p = spec_.dump / r.dump;
    // Whole or not at all (io/atomic_file.h); the IoError names the file and the OS reason.
    try {
      write_file_atomic(p, std::as_bytes(std::span<const float>(*values)));
    } catch (const IoError& e) {
      throw InspectError(std::string("--inspect dump: ") + e.what());
    }
  }
  try {
    file_->write_line(to_json_line(r));
  } catch (const IoError& e) {
    throw InspectError(e.what());
  }
  records_.push_back(std::move(r));
}

void TensorInspector::record_gradients(const optim::Optimizer& opt, double loss_scale) {
  if (!active_ || !spec_.wants(Role::weight_grad)) return;
  for (const optim::ParamState& p : opt.params()) {
    const auto [module, tensor] = split_param(p.name);
    if (!spec_.module_selected(module)) continue;
    // The gradients are still multiplied by the loss scale here (callbacks.h, StepContext).
    const double keep = loss_scale_;
    loss_scale_ = loss_scale;
    record(module, "", Role::weight_grad, tensor, p.param.grad(), 1.0);
    loss_scale_ = keep;
  }
}

void TensorInspector::record_parameters(const optim::Optimizer& opt) {
  if (!active_) return;
  for (const optim::ParamState& p : opt.params()) {
    const auto [module, tensor] = split_param(p.name);
    if (!spec_.module_selected(module)) continue;
    if (spec_.wants(Role::weight)) record(module, "", Role::weight, tensor, p.param, 1.0);
    if (spec_.wants(Role::optimizer_state)) {
      for (size_t k = 0; k < p.slots.size() && k < opt.slot_names().size(); ++k)
        record(module, "", Role::optimizer_state, tensor + "." + opt.slot_names()[k], p.slots[k],
               1.0);
    }
  }
}

std::string TensorInspector::summary() const {
  if (records_.empty()) return "inspect: no tensor was inspected (check the steps and filters)\n";
  struct Worst {
    double frac = -1;
    const StatRecord* rec = nullptr;
  };
  // (role, format) -> worst overflow, worst underflow.
  std::map<std::pair<int, int>, std::pair<Worst, Worst>> worst;
  int64_t first = records_.front().step, last = first, nonfinite = 0;
  for (const StatRecord& r : records_) {
    first = std::min(first, r.step);
    last = std::max(last, r.step);
    nonfinite += r.stats.nan + r.stats.inf;
    for (const FormatStats& f : r.stats.formats) {
      auto& w = worst[{int(r.role), int(f.format)}];
      const double ov = r.stats.fraction(f.overflow), un = r.stats.fraction(f.underflow);
      if (ov > w.first.frac) w.first = {ov, &r};
      if (un > w.second.frac) w.second = {un, &r};
    }
  }
  auto where = [](const Worst& w) {
    if (!w.rec || w.frac <= 0) return std::string("-");
    return fmt::format("{} {} (step {})", w.rec->module, w.rec->tensor, w.rec->step);
  };
  std::string s = fmt::format(
      "inspect: {} records, steps {}..{}, {} non-finite values -> {}\n", records_.size(), first,
      last, nonfinite, spec_.out.string());
  s += fmt::format("  {:<16} {:<9} {:>9}  {:<36} {:>9}  {}\n", "role", "format", "overflow",
                   "worst at", "underflow", "worst at");
  for (const auto& [key, w] : worst) {
    s += fmt::format("  {:<16} {:<9} {:>8.3f}%  {:<36} {:>8.3f}%  {}\n",
                     to_string(Role(key.first)), to_string(StatFormat(key.second)),
                     100 * std::max(0.0, w.first.frac), where(w.first),
                     100 * std::max(0.0, w.second.frac), where(w.second));
  }
  return s;
}

}  // namespace mixp::inspect
