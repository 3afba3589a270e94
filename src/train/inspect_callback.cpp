// InspectCallback (inspect_callback.h): the Trainer's stages drive the inspect tools.
#include "mixp/train/inspect_callback.h"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>

#include "mixp/optim/optimizer.h"
#include "mixp/tensor/allocator.h"
#include "mixp/train/recipe.h"
#include "mixp/train/trainer.h"

namespace mixp::train {
namespace {
double wall_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

InspectCallback::InspectCallback(Trainer& trainer, InspectOptions options)
    : trainer_(trainer), o_(std::move(options)) {
  if (!o_.profile_trace.empty()) {
    o_.profile = true;
    // Refused now rather than after the run: the trace is written at the end.
    const std::filesystem::path dir = std::filesystem::absolute(o_.profile_trace).parent_path();
    if (!std::filesystem::is_directory(dir)) {
      throw inspect::InspectError("--profile-trace " + o_.profile_trace.string() +
                                  ": the folder " + dir.string() + " does not exist");
    }
  }
  const inspect::ModuleTracker* tracker = nullptr;
  if (o_.inspect) {
    inspector_ = std::make_unique<inspect::TensorInspector>(*o_.inspect);
    inspector_->attach(trainer_.model());
    tracker = &inspector_->tracker();
  }
  if (o_.detect_anomaly) {
    if (!tracker) {
      tracker_ = std::make_unique<inspect::ModuleTracker>();
      tracker_->attach(trainer_.model());
      tracker = tracker_.get();
    }
    anomaly_ = std::make_unique<inspect::AnomalyDetector>(
        tracker, [this](const inspect::AnomalyReport& r) {
          const PrecisionRecipe& rec = trainer_.recipe();
          if (r.phase == KernelPhase::optimizer && !r.parameter.empty()) {
            return fmt::format(
                "without --detect-anomaly: the next steps would compute with it until a loss "
                "or gradient turns non-finite; lower the learning rate (now {:g}) or clip "
                "gradients (--clip 1.0)",
                trainer_.config().lr);
          }
          if (rec.skips_nonfinite()) {
            return fmt::format(
                "without --detect-anomaly: precision {} scales the loss (scale {:g}), so the loss "
                "scaler would have skipped step {} anyway and halved the scale; this is routine "
                "unless it happens at every step (then the scale collapses)",
                rec.name(), rec.loss_scale(), r.step);
          }
          return fmt::format(
              "without --detect-anomaly: precision {} does not scale the loss, so the run would "
              "have stopped at the end of step {} with a non-finite loss or gradient",
              rec.name(), r.step);
        });
  }
  if (o_.profile) profiler_ = std::make_unique<inspect::Profiler>();
}

InspectCallback::~InspectCallback() = default;

void InspectCallback::begin_step(int64_t step) {
  set_kernel_phase(KernelPhase::forward);
  if (inspector_) inspector_->begin_step(step, trainer_.recipe().loss_scale());
  if (tracker_) tracker_->clear_nodes();
  if (anomaly_) anomaly_->set_step(step);
}

void InspectCallback::on_train_begin(int64_t first_step, int64_t) {
  if (anomaly_) anomaly_->install();
  if (profiler_) {
    profiler_->install();
    profiling_ = true;
  }
  t0_ms_ = wall_ms();
  begin_step(first_step);
}

void InspectCallback::on_gradients_ready(StepContext& ctx) {
  if (inspector_) inspector_->record_gradients(ctx.optimizer, ctx.loss_scale);
  set_kernel_phase(KernelPhase::optimizer);
  if (profiling_) {
    opt_start_ = std::chrono::steady_clock::now();
    opt_kernel_ns_ = profiler_->phase_ns(KernelPhase::optimizer);
  }
}

void InspectCallback::on_step_end(const StepInfo& info) {
  if (profiling_) {
    const double span = double(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now() - opt_start_)
                                   .count());
    const double kernels = profiler_->phase_ns(KernelPhase::optimizer) - opt_kernel_ns_;
    profiler_->add_span("optimizer_update", trainer_.optimizer().name(),
                        KernelPhase::optimizer, opt_start_, span - kernels);
  }
  // The optimizer's update is not a kernel the detector observes (a fused update, or updates
  // made inside backward with --optimizer-in-backward): what it wrote is scanned here.
  if (anomaly_ && !info.skipped) anomaly_->check_optimizer(trainer_.optimizer());
  if (inspector_) inspector_->record_parameters(trainer_.optimizer());
  begin_step(info.step + 1);
}

namespace {
std::string mib(double b) {
  return fmt::format("{:.1f} MiB", b / (1024.0 * 1024.0));
}

// Parameters, masters, states and gradients against the peak of tracked tensors.
std::string memory_breakdown(const optim::Optimizer& opt) {
  double params = 0, masters = 0, states = 0, grads = 0;
  for (const optim::ParamState& p : opt.params()) {
    params += double(p.param.nbytes());
    if (p.master.defined()) masters += double(p.master.nbytes());
    for (const Tensor& s : p.slots) states += double(s.nbytes());
    if (p.param.grad().defined()) grads += double(p.param.grad().nbytes());
  }
  const double peak = double(allocator_stats(default_device()).peak_allocated_bytes);
  if (!(peak > 0)) return "";
  const double sum = params + masters + states + grads;
  return fmt::format(
      "memory at the training loop's peak of tracked tensors ({}): parameters {}, fp32 master "
      "copies {}, optimizer states {}, gradients {} = {:.0f}% of it; the rest is activations "
      "and workspace\n",
      mib(peak), mib(params), mib(masters), mib(states), mib(grads), 100 * sum / peak);
}
}  // namespace

void InspectCallback::stop_profiler() {
  if (profiling_) {
    memory_ = memory_breakdown(trainer_.optimizer());
    wall_ms_ = wall_ms() - t0_ms_;
    profiler_->uninstall();
    profiling_ = false;
  }
}

void InspectCallback::on_evaluate_begin() {
  stop_profiler();
  if (anomaly_) anomaly_->uninstall();  // the training steps only
  if (inspector_) inspector_->end_steps();
  set_kernel_phase(KernelPhase::other);
}

void InspectCallback::on_train_end() {
  stop_profiler();
  if (anomaly_) anomaly_->uninstall();
  if (inspector_) inspector_->end_steps();
  set_kernel_phase(KernelPhase::forward);
  if (profiler_ && !o_.profile_trace.empty()) profiler_->write_trace(o_.profile_trace);
}

std::string InspectCallback::summary() const {
  std::string s;
  if (inspector_) s += inspector_->summary();
  if (profiler_) {
    s += fmt::format("profile of the training steps (kernels by op, dtype and phase):\n{}",
                     profiler_->table(wall_ms_));
    s += memory_;
    if (!o_.profile_trace.empty()) s += "chrome trace: " + o_.profile_trace.string() + "\n";
  }
  return s;
}

}  // namespace mixp::train
