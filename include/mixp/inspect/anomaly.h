// NaN/Inf origin (`mixp train --detect-anomaly`, docs/inspect.md): stops at the first kernel that
// writes a non-finite value and says where it came from: the kernel, the module (by path), forward
// or backward (and in backward, the forward op whose gradient it computes), the step, and the
// statistics of the kernel's inputs. The caller adds what the run's loss scaler would have done.
//
// It is a kernel observer (mixp/backend/kernel_observer.h): installed, every kernel's outputs are
// scanned (bf16, fp16, fp32, fp64); not installed, it costs nothing. `fill` is not checked (it
// writes constants the caller chose). The optimizer's update is checked apart (check_optimizer).
#pragma once
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "mixp/backend/kernel_observer.h"
#include "mixp/inspect/module_tracker.h"
#include "mixp/inspect/tensor_stats.h"

namespace mixp::optim {
class Optimizer;
}

namespace mixp::inspect {

struct TensorSummary {
  DType dtype = DType::fp32;
  Shape shape;
  TensorStats stats;  // no per-format counts
};

struct AnomalyReport {
  int64_t step = 0;
  KernelPhase phase = KernelPhase::forward;  // forward, backward, optimizer, ...
  std::string kernel;                        // "unary:sqrt", "matmul"
  std::string op;        // backward: the forward op whose backward ran ("sqrt"); forward: ""
  std::string module;    // dotted path, "" when outside the model (loss, optimizer)
  std::string kind;      // the module's kind in the forward pass
  int64_t nan = 0, inf = 0;  // in the output that had them
  int output = 0;            // which output of the kernel
  std::vector<TensorSummary> inputs;
  std::string note;  // what the run would have done (the loss scaler's skip), from the caller
  // Optimizer updates (check_optimizer): the parameter ("fc1.weight") and which of its tensors
  // the update left non-finite ("exp_avg_sq", "master", "param"); kernel is the optimizer's name.
  std::string parameter, tensor;
  int64_t more = 0;  // further non-finite tensors the same update left
  std::string message() const;
};

class AnomalyError : public std::runtime_error {
 public:
  explicit AnomalyError(AnomalyReport r) : std::runtime_error(r.message()), report(std::move(r)) {}
  AnomalyReport report;
};

class AnomalyDetector final : public KernelObserver {
 public:
  // `tracker` names modules (may be null: no module paths); `note` is asked, once, for the
  // report's note.
  explicit AnomalyDetector(const ModuleTracker* tracker,
                           std::function<std::string(const AnomalyReport&)> note = {});
  ~AnomalyDetector() override;
  AnomalyDetector(const AnomalyDetector&) = delete;
  AnomalyDetector& operator=(const AnomalyDetector&) = delete;

  void install();    // add_kernel_observer
  void uninstall();  // remove_kernel_observer
  void set_step(int64_t step) { step_ = step; }

  void after(const KernelCall& call) override;
  // After an optimizer update (the fused one, or the updates made inside backward), which no
  // kernel observer sees: scans every parameter of `opt` with its master weights and states and
  // throws AnomalyError (phase optimizer) naming the first non-finite one, states first (the
  // update writes them before the weights).
  void check_optimizer(const optim::Optimizer& opt);

 private:
  const ModuleTracker* tracker_;
  std::function<std::string(const AnomalyReport&)> note_;
  int64_t step_ = 0;
  bool installed_ = false;
};

// Counts of NaN and inf in a tensor of a floating dtype (0, 0 for others).
std::pair<int64_t, int64_t> count_nonfinite(const Tensor& t);

}  // namespace mixp::inspect
