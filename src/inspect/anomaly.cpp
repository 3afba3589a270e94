// AnomalyDetector (anomaly.h): scans each kernel's outputs for NaN/inf and reports the first.
#include "mixp/inspect/anomaly.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "mixp/autograd/node.h"
#include "mixp/backend/backend.h"
#include "mixp/autograd/op_list.h"
#include "mixp/optim/optimizer.h"

namespace mixp::inspect {
namespace {

std::string describe_shape(const Shape& s) {
  return s.str();
}

}  // namespace

std::pair<int64_t, int64_t> count_nonfinite(const Tensor& t) {
  if (!t.defined() || t.numel() == 0) return {0, 0};
  const DType d = t.dtype();
  if (d != DType::fp32 && d != DType::bf16 && d != DType::fp16 && d != DType::fp64) return {0, 0};
  // The backend's count (any layout), read back to the host.
  Tensor counts = Tensor::empty({2}, {.dtype = DType::int64, .device = t.device()});
  backend_for(t).count_nonfinite(counts, t);
  const std::vector<int64_t> c = counts.to_vector<int64_t>();
  return {c[0], c[1]};
}

std::string AnomalyReport::message() const {
  if (!parameter.empty()) {
    std::string s = fmt::format(
        "detect-anomaly: step {}, optimizer: the {} update wrote {} NaN and {} inf into {} of "
        "parameter {}",
        step, kernel, nan, inf, tensor, parameter);
    if (more > 0) s += fmt::format(" (and into {} more tensor{})", more, more == 1 ? "" : "s");
    if (!note.empty()) s += "\n  " + note;
    return s;
  }
  std::string where = module.empty() ? std::string("outside the model's modules (the loss, or "
                                                   "the optimizer)")
                                     : fmt::format("in module {}{}", module,
                                                   kind.empty() ? "" : " (" + kind + ")");
  std::string what =
      phase == KernelPhase::backward
          ? fmt::format("the backward of op '{}' (kernel {})", op.empty() ? "?" : op, kernel)
          : fmt::format("kernel {}", kernel);
  std::string s = fmt::format(
      "detect-anomaly: step {}, {} pass: {} {} wrote {} NaN and {} inf (output {})", step,
      to_string(phase), what, where, nan, inf, output);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorSummary& in = inputs[i];
    s += fmt::format(
        "\n  input {}: {} {}  amax {:g}  amin_nz {:g}  rms {:g}  nan {}  inf {}", i,
        name(in.dtype), describe_shape(in.shape), in.stats.amax, in.stats.amin_nz, in.stats.rms,
        in.stats.nan, in.stats.inf);
  }
  if (!note.empty()) s += "\n  " + note;
  return s;
}

AnomalyDetector::AnomalyDetector(const ModuleTracker* tracker,
                                 std::function<std::string(const AnomalyReport&)> note)
    : tracker_(tracker), note_(std::move(note)) {}

AnomalyDetector::~AnomalyDetector() {
  uninstall();
}

void AnomalyDetector::install() {
  if (!installed_) add_kernel_observer(this);
  installed_ = true;
}

void AnomalyDetector::uninstall() {
  if (installed_) remove_kernel_observer(this);
  installed_ = false;
}

void AnomalyDetector::after(const KernelCall& call) {
  if (std::strcmp(call.kernel, "fill") == 0) return;
  for (size_t k = 0; k < call.outputs.size(); ++k) {
    const auto [nan, inf] = count_nonfinite(*call.outputs[k]);
    if (nan == 0 && inf == 0) continue;
    AnomalyReport r;
    r.step = step_;
    r.phase = kernel_phase();
    r.kernel = *call.variant ? fmt::format("{}:{}", call.kernel, call.variant) : call.kernel;
    r.nan = nan;
    r.inf = inf;
    r.output = int(k);
    if (r.phase == KernelPhase::backward) {
      if (const Node* n = current_backward_node()) {
        if (const auto* f = dynamic_cast<const FunctionNode*>(n)) {
          r.op = std::string(op_name(f->op()));
        } else {
          r.op = n->name();
        }
        if (tracker_) r.module = tracker_->module_of_node(n->sequence_nr);
      }
    } else if (tracker_) {
      r.module = tracker_->current_path();
      r.kind = tracker_->current_kind();
    }
    for (const Tensor* in : call.inputs) {
      if (!in->is_floating_point()) continue;
      r.inputs.push_back({in->dtype(), in->shape(), tensor_stats(*in, {})});
    }
    if (note_) r.note = note_(r);
    uninstall();  // the run stops: no more reports
    throw AnomalyError(std::move(r));
  }
}

void AnomalyDetector::check_optimizer(const optim::Optimizer& opt) {
  if (!installed_) return;
  AnomalyReport r;
  for (const optim::ParamState& p : opt.params()) {
    // In the order the update writes them: the states from the gradient, then the weights.
    std::vector<std::pair<std::string, const Tensor*>> written;
    for (size_t k = 0; k < p.slots.size(); ++k) {
      written.emplace_back(k < opt.slot_names().size() ? opt.slot_names()[k]
                                                       : fmt::format("state {}", k),
                           &p.slots[k]);
    }
    written.emplace_back("master", &p.master);
    written.emplace_back("comp", &p.comp);
    written.emplace_back("param", &p.param);
    for (const auto& [tensor, t] : written) {
      const auto [nan, inf] = count_nonfinite(*t);
      if (nan == 0 && inf == 0) continue;
      if (!r.parameter.empty()) {
        ++r.more;
        continue;
      }
      r.parameter = p.name;
      r.tensor = tensor;
      r.nan = nan;
      r.inf = inf;
    }
  }
  if (r.parameter.empty()) return;
  r.step = step_;
  r.phase = KernelPhase::optimizer;
  r.kernel = opt.name();
  if (note_) r.note = note_(r);
  uninstall();  // the run stops: no more reports
  throw AnomalyError(std::move(r));
}

}  // namespace mixp::inspect
