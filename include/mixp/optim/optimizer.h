// Optimizer: the base of SGD, Adam and AdamW, over named parameters.
//
// step() walks the parameters once; for each parameter with a gradient it asks the subclass for
// this step's element rule (update_rule) and hands it with the parameter's tensors to the fused
// update kernel of the parameters' backend (Backend::optimizer_update, backend/backend.h): one
// pass over the elements that reads the gradient, updates the states and writes the new value.
// Parameters without a gradient are skipped and their per-parameter step count does not advance
// (PyTorch). Every buffer (states, master copies, scratch) is allocated at construction or at the
// first step, so later steps allocate nothing.
//
// Working precision. The update runs in fp32 (fp64 for fp64 parameters, so the fp64 recipe stays
// a true reference); optimizer states have the working dtype. Parameters narrower than fp32
// (bf16, fp16, fp8, ...) are handled by the extension point below.
//
// Low-precision parameters, master weights and write-back rounding (docs/architecture.md 3.7,
// optim). Every parameter has a ParamState slot:
//   param   the model's tensor, in whatever dtype the recipe gave it
//   master  an fp32 copy, made at construction when param is narrower than fp32 and
//           PrecisionOptions::master_weights is on; the update is applied to it, then
//   write-back: param = round(master) with PrecisionOptions::write_back (nearest-even, or
//           stochastic as in llm.c's pure-bf16 training, with a counter-based seed per parameter
//           and step, so resumed runs round identically) and PrecisionOptions::overflow.
//   Without master weights (pure low-precision training) the update runs on fp32 values widened
//   from param chunk by chunk (no full-size fp32 copy exists), and is written back the same way.
//   comp    (PrecisionOptions::kahan, only without master weights) a Kahan compensation buffer in
//           param's dtype: the part of each update that the rounding of param lost is carried to
//           the next step instead of being dropped (Zamirai et al. 2020, "Revisiting BFloat16
//           Training"; optimi's kahan_sum). Per element, in fp32:
//             y = (w_new - p) + comp;  p' = round(p + y);  comp' = round_ne(y - (p' - p))
//           It costs 2 bytes per bf16 parameter where a master copy costs 4.
//   States  slots are stored in PrecisionOptions::state_dtype: fp32 (default) or bf16 (pure bf16
//           training, "bf16 parameters and states"). bf16 states are widened chunk by chunk and
//           rounded back with write_back's rounding; with stochastic rounding each slot has its
//           own stream, so Adam's second moment keeps moving although (1 - beta2) g^2 is below
//           half a bf16 ulp of v (nearest rounding would freeze it).
// The element rules only ever see fp32/fp64 values; the storage formats are the kernel's.
//
// Versions and weight shadows. Every step that writes a parameter bumps its version counter
// (tensor.h). An fp32 parameter with a current autocast weight shadow (amp's cache, reached
// through optim/weight_shadow_hook.h; docs/amp.md) gets the shadow rewritten in the same pass,
// chunk by chunk, rounded exactly as autocast casts, so the next forward uses it without
// converting; a shadow that is stale, held elsewhere or unwanted (amp::set_weight_shadows(false))
// is dropped instead. Skipped steps touch neither.
//
// State dict. tensors: "<param>.<slot>" for each state slot (e.g. "fc1.weight.exp_avg") and
// "<param>.master" for master copies, "<param>.kahan" for compensation buffers; scalars: "step"
// (calls of step()), "lr", and "<param>.step". state_dict() returns copies (a snapshot);
// load_state_dict copies values in after checking every name and shape, so a mismatch changes
// nothing.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mixp/backend/backend.h"
#include "mixp/format/rounding.h"
#include "mixp/tensor/tensor.h"

namespace mixp::optim {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

struct PrecisionOptions {
  bool master_weights = true;              // fp32 master copies of parameters narrower than fp32
  Round write_back = Round::nearest_even;  // rounding of the update written back to such params
  Overflow overflow = Overflow::ieee;      // overflow of that write-back
  uint64_t seed = 0;                       // stochastic write-back stream (see write_back_seed)
  bool kahan = false;                      // Kahan-compensated write-back; needs master_weights off
  DType state_dtype = DType::fp32;         // fp32 or bf16 (fp64 parameters always keep fp64 states)
};

struct StateDict {
  NamedTensors tensors;
  std::vector<std::pair<std::string, double>> scalars;
  // nullptr when absent
  const Tensor* find_tensor(const std::string& name) const;
  const double* find_scalar(const std::string& name) const;
};

struct ParamState {
  std::string name;
  Tensor param;
  Tensor master;              // fp32, or undefined (the update is applied to param directly)
  Tensor comp;                // Kahan compensation (param's dtype), or undefined
  std::vector<Tensor> slots;  // optimizer states, PrecisionOptions::state_dtype, param's shape
  int64_t step = 0;           // updates applied to this parameter
  Tensor grad_work;           // scratch gradient when .grad is not contiguous in the working dtype
};

class Optimizer {
 public:
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  virtual std::string name() const = 0;

  // One update of every parameter that has a gradient.
  void step();
  // The same step one parameter at a time, for an optimizer fused into backward (PyTorch's
  // "optimizer in backward": a post-accumulate-grad hook steps each parameter as soon as its
  // gradient is final, train_config.h optimizer_in_backward). step() is exactly
  //   for (i = 0 .. params().size() - 1) step_parameter(i);  finish_step();
  // and every update is a function of the parameter's own gradient, states and step count, so any
  // order of step_parameter calls (each parameter at most once) followed by finish_step() leaves
  // the same bits as step(). Parameters without a gradient are skipped, as by step().
  void step_parameter(size_t index);
  void finish_step() { ++steps_; }
  // Clears the gradients (set_to_none: drops them, like PyTorch 2; else fills them with 0).
  void zero_grad(bool set_to_none = true);

  double lr() const { return lr_; }
  void set_lr(double lr);
  int64_t step_count() const { return steps_; }

  const std::vector<ParamState>& params() const { return params_; }
  std::vector<Tensor> parameters() const;
  // The slot names of every parameter's state, e.g. {"exp_avg", "exp_avg_sq"}.
  const std::vector<std::string>& slot_names() const { return slot_names_; }
  const PrecisionOptions& precision() const { return precision_; }

  StateDict state_dict() const;
  // Throws std::invalid_argument naming the first missing/extra/mismatched entry.
  void load_state_dict(const StateDict& sd);

  // Re-copies every master from its parameter (after the parameters were loaded or changed
  // outside the optimizer; load_state_dict restores masters itself).
  void reset_masters_from_params();

  // The stochastic-rounding seed of parameter `index` at per-parameter step `step`: a function
  // of its stream (by default `index`), the step and PrecisionOptions::seed.
  uint64_t write_back_seed(size_t index, int64_t step) const;
  // Gives parameter i the write-back stream streams[i] instead of i. A ZeRO shard's optimizer
  // holds a subset of the model's parameters; given their indices in the whole list it rounds
  // exactly as the unsharded optimizer does (train/trainer.cpp). `offsets` (empty: all 0): where
  // parameter i starts in its stream's elements, for a ZeRO 3 shard that holds rows of a
  // parameter (its element e draws the whole parameter's element offsets[i] + e); stochastic
  // write-back with an offset is for CPU parameters. Throws std::invalid_argument when a size
  // is not params().size().
  void set_write_back_streams(std::vector<uint64_t> streams, std::vector<uint64_t> offsets = {});

 protected:
  // params: named leaves (floating, contiguous, distinct); unnamed ones are called "0", "1", ...
  Optimizer(NamedTensors params, double lr, const PrecisionOptions& precision,
            std::vector<std::string> slot_names);

  // The element update of one parameter step (backend.h, UpdateRule): its per-step scalars in
  // double. `step` is this parameter's step count, already incremented.
  virtual UpdateRule update_rule(int64_t step) const = 0;

  static NamedTensors name_by_index(const std::vector<Tensor>& params);

 private:
  void step_param(size_t index);
  void write_back(size_t index, const Tensor& from);

  std::vector<ParamState> params_;
  std::vector<std::string> slot_names_;
  PrecisionOptions precision_;
  std::vector<uint64_t> streams_;  // empty: parameter i draws stream i
  std::vector<uint64_t> offsets_;  // empty: every parameter starts at element 0 of its stream
  double lr_;
  int64_t steps_ = 0;
};

}  // namespace mixp::optim
