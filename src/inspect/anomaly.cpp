// AnomalyDetector (anomaly.h): scans each kernel's outputs for NaN/inf and reports the first.
#include "mixp/inspect/anomaly.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "mixp/autograd/node.h"
#include "mixp/ops/op_list.h"

namespace mixp::inspect {
namespace {

// Counts over the tensor's elements (contiguous outputs; strided ones are read through a copy).
template <class Bits>
std::pair<int64_t, int64_t> count_bits(const Bits* p, int64_t n, Bits exp_mask, Bits man_mask) {
  int64_t nan = 0, inf = 0;
  for (int64_t i = 0; i < n; ++i) {
    const Bits b = p[i];
    if ((b & exp_mask) == exp_mask) ((b & man_mask) ? nan : inf) += 1;
  }
  return {nan, inf};
}

std::string describe_shape(const Shape& s) {
  return s.str();
}

}  // namespace

std::pair<int64_t, int64_t> count_nonfinite(const Tensor& t) {
  if (!t.defined() || t.numel() == 0) return {0, 0};
  const DType d = t.dtype();
  if (d != DType::fp32 && d != DType::bf16 && d != DType::fp16 && d != DType::fp64) return {0, 0};
  if (!t.is_contiguous()) {
    const TensorStats s = tensor_stats(t, {});
    return {s.nan, s.inf};
  }
  const int64_t n = t.numel();
  switch (d) {
    case DType::fp32:
      return count_bits<uint32_t>(static_cast<const uint32_t*>(t.data_ptr()), n, 0x7F800000u, 0x007FFFFFu);
    case DType::fp64:
      return count_bits<uint64_t>(static_cast<const uint64_t*>(t.data_ptr()), n, 0x7FF0000000000000ull,
                                  0x000FFFFFFFFFFFFFull);
    case DType::bf16:
      return count_bits<uint16_t>(static_cast<const uint16_t*>(t.data_ptr()), n, uint16_t(0x7F80), uint16_t(0x007F));
    case DType::fp16:
      return count_bits<uint16_t>(static_cast<const uint16_t*>(t.data_ptr()), n, uint16_t(0x7C00), uint16_t(0x03FF));
    default:
      return {0, 0};
  }
}

std::string AnomalyReport::message() const {
  std::string where = module.empty() ? std::string("outside the model's modules (the loss, or "
                                                   "the optimizer)")
                                     : fmt::format("in module {}{}", module,
                                                   kind.empty() ? "" : " (" + kind + ")");
  std::string what = phase == KernelPhase::backward
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

}  // namespace mixp::inspect
