// Tensor statistics during training (`mixp train --inspect SPEC`, docs/inspect.md): one JSON
// line per (step, module, role, tensor) with the statistics of tensor_stats.h, and a console
// summary. The train module drives it from the Trainer's callback stages
// (mixp/train/inspect_callback.h); it can be driven by hand too:
//
//   inspect::TensorInspector ins(inspect::parse_inspect_spec("every=10,roles=activation"));
//   ins.attach(model);                       // before the first forward
//   ins.begin_step(step, loss_scale);        // before each step's forward
//   ... forward, backward ...
//   ins.record_gradients(optimizer, loss_scale);   // gradients still times the loss scale
//   ... optimizer step ...
//   ins.record_parameters(optimizer);              // weights and optimizer states
//
// Roles: activation (a module's output, in its forward), activation-grad (the gradient of that
// output, in backward: scaled by the loss scale like every gradient of the backward pass),
// weight, weight-grad (the summed gradients before unscaling, i.e. at the current loss scale),
// optimizer-state (every slot, e.g. exp_avg), fp8-operand (each operand an FP8 layer's
// per-tensor cast quantizes -- tensor "input", "weight" or "grad_output" -- multiplied by the
// scale that cast used, with the statistics of the FP8 format it is cast to; so its `underflow`
// counts the nonzero values the cast flushes to zero. The record's loss_scale holds that FP8
// scale. Delayed and current scaling from amp::set_fp8_operand_observer; the block recipes
// (fp8-block, nvfp4, mxfp4) from amp::set_block_operand_observer, their records with a `block`
// object instead of formats; attach() installs both: one attached inspector at a time). Weights, gradients and states belong to the module
// that owns the parameter ("blocks.0.attn.qkv" for "blocks.0.attn.qkv.weight"); `tensor` names
// the parameter or slot.
#pragma once
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mixp/inspect/block_stats.h"
#include "mixp/inspect/inspect_spec.h"
#include "mixp/io/line_file.h"
#include "mixp/inspect/module_tracker.h"
#include "mixp/inspect/tensor_stats.h"

namespace mixp::optim {
class Optimizer;
}
namespace mixp::amp {
class Fp8LinearMeta;
enum class Fp8Role : uint8_t;
}

namespace mixp::inspect {

// One record, as written to the JSON Lines file.
struct StatRecord {
  int64_t step = 0;
  std::string module;  // dotted path
  std::string kind;    // the module's kind ("linear"), "" for parameters of a shared module
  Role role = Role::activation;
  std::string tensor;  // "output", "weight", "bias", "exp_avg", ...
  // activation, activation-grad: which output of the module in this step (0-based; more than one
  // with gradient accumulation or a module called twice). 0 for the other roles.
  int64_t call = 0;
  DType dtype = DType::fp32;
  Shape shape;
  double loss_scale = 1.0;
  TensorStats stats;
  // fp8-operand records of the block recipes: what the layer's block quantizer does to the
  // operand (block_stats.h, as `mixp inspect blocks` computes it; without the per-block vectors).
  // Absent elsewhere, and when the operand holds non-finite values.
  std::optional<BlockScaledStats> block;
  std::string dump;  // file name in the dump folder, or ""
};
std::string to_json_line(const StatRecord& r);

class TensorInspector {
 public:
  // Opens spec.out (fresh) and creates spec.dump; throws InspectError when it cannot.
  explicit TensorInspector(InspectSpec spec);
  ~TensorInspector();
  TensorInspector(const TensorInspector&) = delete;
  TensorInspector& operator=(const TensorInspector&) = delete;

  // Observes the modules of `model` (which must outlive this inspector or its detach()).
  void attach(nn::Module& model);
  void detach();

  void begin_step(int64_t step, double loss_scale);
  // No step is being inspected (evaluation).
  void end_steps() { active_ = false; }
  bool active() const { return active_; }
  int64_t step() const { return step_; }

  void record_gradients(const optim::Optimizer& opt, double loss_scale);
  void record_parameters(const optim::Optimizer& opt);
  // Records one tensor under a module path and role (what the callbacks above do per tensor).
  void record(const std::string& module, const std::string& kind, Role role,
              const std::string& tensor, const Tensor& t, double scale, int64_t call = 0);
  // An fp8-operand record: `operand` times the FP8 cast's `scale`, in that role's FP8 format
  // (whatever formats= says), for the FP8 layer that owns `meta`.
  void record_fp8_operand(const amp::Fp8LinearMeta& meta, amp::Fp8Role role,
                          const Tensor& operand, float scale);
  // An fp8-operand record of a block recipe's layer (amp::set_block_operand_observer): the
  // operand's statistics (no formats) and its `block` statistics under `options`.
  void record_block_operand(const amp::Fp8LinearMeta& meta, std::string_view tensor,
                            const Tensor& operand, const BlockScaledOptions& options);

  const std::vector<StatRecord>& records() const { return records_; }
  // A table of the worst cases: per role and format, the module with the largest overflow and
  // underflow fractions over the inspected steps, and the widest dynamic ranges.
  std::string summary() const;
  const InspectSpec& spec() const { return spec_; }
  ModuleTracker& tracker() { return tracker_; }

 private:
  Tensor on_output(const std::string& path, nn::Module& m, Tensor y);
  void write(StatRecord r, const std::vector<float>* values);
  void record_as(const std::string& module, const std::string& kind, Role role,
                 const std::string& tensor, const Tensor& t, double scale, int64_t call,
                 std::span<const StatFormat> formats, double record_scale);
  // The dotted path and kind of the FP8 layer that owns `meta` ("" when none of the model's).
  const std::pair<std::string, std::string>* fp8_layer(const amp::Fp8LinearMeta* meta);

  InspectSpec spec_;
  ModuleTracker tracker_;
  std::unique_ptr<LineFile> file_;  // out=: one JSON line per record (io/line_file.h)
  bool active_ = false;
  int64_t step_ = 0;
  double loss_scale_ = 1.0;
  std::vector<StatRecord> records_;  // without per-value data; for the summary
  std::map<std::string, int64_t> calls_;  // outputs of each module so far in this step
  nn::Module* model_ = nullptr;
  bool observing_fp8_ = false;  // installed the FP8 (and block) operand observers
  // FP8 layers by their meta: (path, kind); rebuilt when a meta is not found (the recipe may
  // enable FP8 after attach()).
  std::map<const amp::Fp8LinearMeta*, std::pair<std::string, std::string>> fp8_layers_;
};

}  // namespace mixp::inspect
