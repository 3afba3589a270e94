// FP8 linear layers: the fused op, its autocast region, and the layer/model transforms, after
// TransformerEngine's te.Linear and te.fp8_autocast (docs/fp8.md).
//
// fp8_linear(x, w, b, act, meta), y = act(x w^T + b), as TE's Linear with an FP8 recipe:
//   forward   x (role input) and w (role weight) are quantized to E4M3 with their own scales;
//             the GEMM multiplies the codes (mixp::gemm: bf16 x bf16 -> fp32 on oneDNN on the
//             cpu, cuBLASLt's FP8 GEMM with the codes in fp8 on cuda sm_89+; exact products,
//             fp32 accumulation) and the fp32 result is multiplied by scale_inv_x * scale_inv_w;
//             bias and ReLU are applied to that in fp32. The output is fp32.
//   backward  the gradient wrt the pre-activation output (role grad_output) is quantized to E5M2
//             (HYBRID; E4M3 under Fp8Format::e4m3) with its own scale; then
//               dgrad  dx = (q_g @ q_w) * scale_inv_g * scale_inv_w
//               wgrad  dw = (q_g^T @ q_x) * scale_inv_g * scale_inv_x
//             reusing the forward's quantized x and w (TE saves its fp8 copies); the bias
//             gradient is the row sum of the unquantized gradient (TE's fused cast+bgrad).
//   MXFP8     the same GEMMs with blocks of 32 along each GEMM's reduction dimension (K forward,
//             N for dgrad, M for wgrad): x and w are quantized row-wise for the forward and
//             column-wise for the backward, both from the high-precision tensors, as TE does;
//             the blocks are dequantized to bf16 (fp8_quantize.h says when that is exact).
// The gradients of x, w and b are fp32 (converted to x's gradient dtype by the engine).
//
// Delayed scaling state (Fp8LinearMeta) follows TE's update points:
//   - the forward roles (input, weight) are updated when the outermost Fp8Autocast region
//     exits with grad mode on (TE: fp8_autocast exit -> reduce_and_update_fp8_tensors(forward));
//   - grad_output is updated after the backward that used it (TE: at the end of backward). mixp
//     does this when the next outermost Fp8Autocast region is entered, or explicitly with
//     fp8_update_backward_states() (the fp8 training recipes call it after every optimizer
//     step, so a checkpoint never holds a pending update). No FP8 cast happens between the end
//     of a backward and the next forward, so the two points are equivalent.
// Outside any Fp8Autocast region fp8_linear still quantizes and records amaxes, but nothing
// updates the scales: call Fp8ScalingState::update() yourself.
//
// Evaluation: a region whose outermost level was entered with grad mode off (an evaluation pass)
// quantizes with the current scales and leaves the state untouched. (TE records such a pass's
// amaxes into slot 0, where the next training update picks them up; mixp does not, so that
// evaluating never changes training and a run resumed from a checkpoint written after an
// evaluation continues bit for bit.)
//
// Activation recomputation (checkpoint()): the recomputed forward runs during backward, after
// the forward roles were updated. A region opened with `recompute = true` (gpt's checkpointed
// blocks do it) quantizes the forward roles with the scales from before that update -- the ones
// the original forward used, so the recomputed activations are the same -- and records nothing
// (TE keeps a copy of the forward meta for recompute for the same reason).
#pragma once
#include <span>
#include <array>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mixp/amp/fp8_scaling.h"
#include "mixp/backend/backend.h"
#include "mixp/nn/linear.h"
#include "mixp/tensor/tensor.h"

namespace mixp {
struct BlockScaledOptions;
}

namespace mixp::amp {

// One layer's FP8 state (TE's fp8_meta): the recipe and, for delayed scaling, a scaling state per
// role (null for current scaling and MXFP8, which keep no state).
class Fp8LinearMeta {
 public:
  explicit Fp8LinearMeta(const Fp8Recipe& recipe);
  const Fp8Recipe& recipe() const { return recipe_; }
  Fp8ScalingState* state(Fp8Role role) const { return states_[static_cast<int>(role)].get(); }
  const std::shared_ptr<Fp8ScalingState>& state_ptr(Fp8Role role) const {
    return states_[static_cast<int>(role)];
  }
  // The state tensors as module buffers: "fp8_<role>_<tensor>", e.g. "fp8_input_amax_history",
  // "fp8_grad_output_scale". Empty for current scaling and MXFP8.
  std::vector<std::pair<std::string, Tensor>> buffers() const;

 private:
  Fp8Recipe recipe_;
  std::array<std::shared_ptr<Fp8ScalingState>, 3> states_;
};

// y = act(x w^T + b) in FP8 as above. x [..., in] (any floating dtype), w [out, in], b [out] or
// undefined; act none, relu (fused) or gelu (applied after, in fp32).
Tensor fp8_linear(const Tensor& x, const Tensor& w, const Tensor& b, Activation act,
                  Fp8LinearMeta& meta);

// te.fp8_autocast: FP8 layers (fp8-enabled nn::Linear, Fp8Linear) compute in FP8 only inside an
// enabled region and in their usual precision outside it. Thread-local, nestable; the innermost
// region decides; see the header comment for the scale updates at entry and exit.
class Fp8Autocast {
 public:
  explicit Fp8Autocast(bool enabled = true, bool recompute = false);
  ~Fp8Autocast();
  Fp8Autocast(const Fp8Autocast&) = delete;
  Fp8Autocast& operator=(const Fp8Autocast&) = delete;
  static bool is_enabled();
  static bool is_recompute();

 private:
  bool prev_enabled_, prev_recompute_;
  bool outermost_;
};

// Updates every grad_output state that recorded an amax since the last update (see above).
void fp8_update_backward_states();

// Data parallelism (TE reduces amaxes over the data-parallel group the same way): when set, every
// update of delayed-scaling states first hands the reducer the states' current amaxes (history
// slot 0, one per state, in the order the pass used them: the same on every rank) and records
// what it returns, e.g. the maximum over all ranks, so that every rank computes the same scales.
// Process-wide; an empty function turns it off. Set by the Trainer (train/data_parallel.h).
using Fp8AmaxReducer = std::function<void(std::span<float> amaxes)>;
void set_fp8_amax_reducer(Fp8AmaxReducer reducer);

// Observation of the per-tensor FP8 casts, for the inspector's fp8-operand records
// (docs/inspect.md): when set, every cast of an fp8_linear operand under delayed or current
// scaling (not MXFP8, whose per-block scales the mxfp8 statistics already cover, and not an
// activation recomputation) calls it with the layer's meta (identifies the layer; valid during the
// call), the role, the operand as the cast reads it (fp32 [rows, K or N]; the gradient after
// the fused ReLU's mask) and the scale the cast multiplies it by. The observer must not change
// the operand. Process-wide, one at a time; an empty function turns it off (the default: then a
// cast costs nothing more).
using Fp8OperandObserver = std::function<void(const Fp8LinearMeta& meta, Fp8Role role,
                                              const Tensor& operand, float scale)>;
void set_fp8_operand_observer(Fp8OperandObserver observer);

// The same for the block recipes (fp8-block, nvfp4, mxfp4; amp/block_linear.cpp), for the
// inspector's block statistics (docs/inspect.md "fp8-operand"): when set, every operand a block
// layer quantizes is handed over just before: the layer's meta, the operand's name ("input" and
// "weight" of the forward GEMM, "grad_output" of the input-gradient GEMM, "weight.columns" where
// that GEMM quantizes W^T anew (1x16 weight tiles), "input.columns" and "grad_output.columns" of
// the weight-gradient GEMM), the fp32 values [R, C] (C the reduction dimension; the column-wise
// operands transposed and, with the RHT, transformed; possibly a transposed view) and the
// quantizer's options, stochastic rounding's seed included, so that quantizing them again gives
// the training's values. Process-wide, one at a time; empty turns it off (the default).
using BlockOperandObserver =
    std::function<void(const Fp8LinearMeta& meta, std::string_view tensor, const Tensor& operand,
                       const BlockScaledOptions& options)>;
void set_block_operand_observer(BlockOperandObserver observer);

// Makes `layer` compute in FP8 (inside Fp8Autocast regions): installs the forward
// implementation and, for delayed scaling, registers the scaling state as buffers of the layer
// (so checkpoints carry it: "fc1.fp8_input_amax_history", ...). Returns the layer's meta. Throws
// std::logic_error if the layer already has a forward implementation.
std::shared_ptr<Fp8LinearMeta> enable_fp8(nn::Linear& layer, const Fp8Recipe& recipe);
// The meta enable_fp8 installed on `layer`, or null.
std::shared_ptr<Fp8LinearMeta> fp8_meta(const nn::Linear& layer);

// True for the names enable_fp8 gives the state buffers ("fc1.fp8_input_amax_history", ...):
// checkpoint loaders tell them from weights with it.
bool is_fp8_state_name(std::string_view dotted_name);

// Applies enable_fp8 to every nn::Linear of `model` that `select(dotted_name, module)` accepts;
// by default to modules of kind "linear" (so a model's head, kind "head", stays out, as do
// embeddings, norms and everything that is not a Linear). Returns the names enabled, in
// named_modules() order.
// An nn::Linear built FP8-enabled (TE's te.Linear): enable_fp8(*this, recipe) at construction.
class Fp8Linear : public nn::Linear {
 public:
  Fp8Linear(int64_t in_features, int64_t out_features, Generator& gen, const Fp8Recipe& recipe,
            const nn::LinearOptions& opt = {});
  Fp8LinearMeta& meta() const { return *meta_; }

 private:
  std::shared_ptr<Fp8LinearMeta> meta_;
};

using Fp8Selector = std::function<bool(const std::string& name, const nn::Module& module)>;
std::vector<std::string> enable_fp8(nn::Module& model, const Fp8Recipe& recipe,
                                    const Fp8Selector& select = {});

}  // namespace mixp::amp
