// FP8 scaling: the recipe (which formats, which scaling) and the per-tensor scaling state of
// delayed scaling, after NVIDIA TransformerEngine (TE; docs/fp8.md is the user's guide).
//
// Formats (TE `Format`): HYBRID = E4M3 (max 448) for the forward tensors (inputs/activations and
// weights) and E5M2 (max 57344) for the gradients; E4M3 = E4M3 everywhere. Pure E5M2 is refused,
// as TE refuses it.
//
// Scaling (a value x is stored as the fp8 code of x * scale, saturating; it means code * scale_inv):
//   delayed  TE `DelayedScaling`: each quantized tensor role keeps an amax history; the scale used
//            now was computed from the amaxes of PREVIOUS steps. See Fp8ScalingState.
//   current  TE `Float8CurrentScaling`: scale = fp8_max / amax(this tensor) / 2^margin, computed
//            just before the cast; no history, nothing to checkpoint.
//   mxfp8    TE `MXFP8BlockScaling`, OCP MX v1.0: blocks of 32 values along the GEMM's reduction
//            dimension share one power-of-two (e8m0) scale (mixp/format/block_mx.h). TE's default
//            format for it is E4M3 in both directions; HYBRID is accepted.
//   fp8_block, nvfp4, mxfp4   the block-scaled recipes of issue 32 (TE's Float8BlockScaling,
//            NVFP4BlockScaling; MXFP4 after Tseng et al. / Quartet), emulated by fake quantization
//            with the quantizers of mixp/format/block_scaled.h; the GEMMs run in fp32 on the
//            dequantized values. docs/fp4.md and docs/fp8.md ("fp8-block") list what each
//            switch below does; the recipes keep no state.
//
// The scale formula is TE's (transformer_engine/common/recipe/__init__.py, DelayedScaling notes;
// the CUDA kernel delayed_scaling.cu computes it in fp32 as scaled_max / amax with
// scaled_max = fp8_max * 2^-margin):
//     scale = (fp8_max / amax) / 2^margin
//   amax == 0, inf or NaN: no information; delayed scaling keeps the previous scale, current
//   scaling uses 1 (TE recipe_common.cuh compute_scale_from_amax);
//   a scale that overflows fp32 (amax below fp8_max / FLT_MAX) becomes FLT_MAX (TE's
//   _default_sf_compute and compute_scale_from_amax).
//   scale_inv = 1 / scale (fp32), what dequantization and the GEMM's output scaling multiply by.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mixp/backend/backend.h"
#include "mixp/format/dtype.h"
#include "mixp/tensor/tensor.h"

namespace mixp::amp {

enum class Fp8Scaling : uint8_t { delayed, current, mxfp8, fp8_block, nvfp4, mxfp4 };

// fp8_block, nvfp4 or mxfp4: quantized by block_scaled_linear (amp/block_linear.cpp).
constexpr bool is_block_scaled(Fp8Scaling s) {
  return s == Fp8Scaling::fp8_block || s == Fp8Scaling::nvfp4 || s == Fp8Scaling::mxfp4;
}
enum class Fp8Format : uint8_t { hybrid, e4m3 };
enum class AmaxComputeAlgo : uint8_t { max, most_recent };

// The tensors a linear layer quantizes (TE's fp8_meta: forward "scaling_fwd" holds input and
// weight, backward "scaling_bwd" holds grad_output).
enum class Fp8Role : uint8_t { input, weight, grad_output };
inline constexpr Fp8Role kFp8Roles[] = {Fp8Role::input, Fp8Role::weight, Fp8Role::grad_output};
std::string_view to_string(Fp8Role r);
std::string_view to_string(Fp8Scaling s);
std::string_view to_string(Fp8Format f);
std::string_view to_string(AmaxComputeAlgo a);

// TE's recipe objects in one struct. Defaults are TE's DelayedScaling defaults except the amax
// history: 16 steps instead of TE's 1024 (docs/fp8.md, "Why the history is 16 steps"). With
// amax_compute_algo max a 1024-step window keeps the large gradient amax of the first steps for
// all of a short run, and the E5M2 scale derived from it flushes most of the later, smaller
// gradients to zero; 16 steps forget it. TE's values are te_delayed() ("fp8:preset=te").
struct Fp8Recipe {
  static constexpr int64_t kDefaultAmaxHistory = 16;
  static constexpr int64_t kTeAmaxHistory = 1024;  // TE DelayedScaling's amax_history_len

  Fp8Scaling scaling = Fp8Scaling::delayed;
  Fp8Format format = Fp8Format::hybrid;
  int64_t amax_history_len = kDefaultAmaxHistory;      // delayed only
  AmaxComputeAlgo amax_compute_algo = AmaxComputeAlgo::max;  // delayed only
  int margin = 0;                                      // delayed and current
  int mx_block = 32;                                   // mxfp8 only
  // The block-scaled recipes' switches (docs/fp4.md; the keys of the recipe options).
  bool rht = true;        // nvfp4, mxfp4 "rht": 16-point RHT on both wgrad operands
  bool weight_2d = true;  // nvfp4 "2d": 16x16 weight tiles (W and W^T quantize alike)
  bool sr = true;         // nvfp4, mxfp4 "sr": stochastic rounding of the gradients
  int bf16_last = 0;      // nvfp4, mxfp4 "bf16_last": last N blocks' Linear layers in bf16
                          // (0 by default: how many depends on the depth; docs/fp4.md)
  bool pow2 = false;      // fp8_block "pow2": power-of-two scales
  int promote = 0;        // fp8_block "promote": 0 = fp32 accumulation; N = emulate a
                          // tensor-core accumulator (fp32 with 14 mantissa bits, truncating)
                          // promoted to fp32 every N products (DeepSeek-V3 3.3.2)

  // The fp8 dtype of a role: E4M3 forward; gradients E5M2 under HYBRID, else E4M3.
  DType dtype(Fp8Role role) const;
  // Throws std::invalid_argument for a history length < 1, a negative margin or a block < 1.
  void validate() const;
  std::string describe() const;  // "delayed scaling, HYBRID (E4M3 fwd / E5M2 bwd), history 1024 (max), margin 0"

  static Fp8Recipe delayed() { return {}; }
  // TE's DelayedScaling defaults exactly (transformer_engine.common.recipe.DelayedScaling:
  // margin=0, fp8_format=HYBRID, amax_history_len=1024, amax_compute_algo="max").
  static Fp8Recipe te_delayed() { return {.amax_history_len = kTeAmaxHistory}; }
  static Fp8Recipe current() { return {.scaling = Fp8Scaling::current}; }
  static Fp8Recipe mxfp8() { return {.scaling = Fp8Scaling::mxfp8, .format = Fp8Format::e4m3}; }
  static Fp8Recipe fp8_block() {
    return {.scaling = Fp8Scaling::fp8_block, .format = Fp8Format::e4m3};
  }
  static Fp8Recipe nvfp4() { return {.scaling = Fp8Scaling::nvfp4, .format = Fp8Format::e4m3}; }
  static Fp8Recipe mxfp4() { return {.scaling = Fp8Scaling::mxfp4, .format = Fp8Format::e4m3}; }
};

// Max finite of fp8_e4m3 (448) or fp8_e5m2 (57344); throws std::invalid_argument for others.
float fp8_max(DType fp8);

// TE's scale update: (fp8_max / amax) / 2^margin in fp32 (as scaled_max / amax with
// scaled_max = fp8_max * 2^-margin); `previous` when amax is 0 or not finite; FLT_MAX when the
// quotient overflows. Defined with the backend that applies it (backend.h, fp8_scale_update).
using mixp::fp8_scale_from_amax;
// Current scaling: the same with previous = 1 (TE compute_scale_from_amax, epsilon 0).
inline float fp8_current_scale(float amax, float fp8_max, int margin) {
  return fp8_scale_from_amax(amax, fp8_max, margin, 1.0f);
}

// The delayed-scaling state of one quantized tensor role (one row of TE's fp8_meta): an amax
// history of `history_len` fp32 values, the scale and its inverse. Stored in three fp32 tensors
// (amax_history [L], scale [1], scale_inv [1]) so they can be module buffers and travel in
// checkpoints by name; initial state as TE: history all 0, scale 1, scale_inv 1.
//
// The state machine (TE delayed_scaling.cu, amax_and_scale_update; pytorch
// _default_get_amax_and_update_history / _update_amax_history), exactly:
//  - quantizing with this state uses scale() as it is: the value computed by the last update();
//  - record_amax(a): history[0] = max(history[0], a) (TE's cast kernels max-reduce the tensor's
//    amax into the history's slot 0; NaN amaxes are ignored, as fmaxf does);
//  - update(), once per pass (TE: forward roles when the outermost fp8_autocast exits, backward
//    roles when backward ends):
//        amax      = max(history)          (amax_compute_algo max; the whole window, slot 0 too)
//                  = history[0]            (most_recent)
//        history   = roll(history, -1); history[0] = 0
//                    i.e. slot 0 (this pass) moves to the end, slot i+1 to slot i, and the new
//                    slot 0 (the oldest entry, now dropped) is zeroed for the next pass;
//        scale     = fp8_scale_from_amax(amax, fp8_max, margin, scale); scale_inv = 1 / scale.
// So the scale used at step t comes from the amaxes of steps t-L .. t-1 (L = history_len), never
// from step t's own tensor; at step 0 it is 1. The history's layout is TE's: slot 0 is the
// current pass, slots 1..L-1 hold earlier passes oldest first, slot L-1 the most recent.
class Fp8ScalingState {
 public:
  Fp8ScalingState(DType fp8, int64_t history_len = Fp8Recipe::kDefaultAmaxHistory,
                  AmaxComputeAlgo algo = AmaxComputeAlgo::max, int margin = 0);

  DType dtype() const { return dtype_; }
  int64_t history_len() const { return history_.numel(); }
  AmaxComputeAlgo algo() const { return algo_; }
  int margin() const { return margin_; }

  float scale() const;
  float scale_inv() const;
  // The scale and scale_inv before the last update() (activation recomputation quantizes with
  // them; fp8_linear.h). Not part of the saved state: after load() they equal the current ones.
  float previous_scale() const { return prev_scale_; }
  float previous_scale_inv() const { return prev_scale_inv_; }
  float history(int64_t i) const;  // slot i
  std::vector<float> history() const;

  void record_amax(float amax);
  void update();
  // Restores the initial state (history 0, scale 1).
  void reset();

  // The tensors (fp32, contiguous), in TE's names: {"amax_history", "scale", "scale_inv"}.
  // Handles to the state itself: writing into them changes the state, and the state reads them
  // on every call, so they may be registered as module buffers and loaded in place.
  std::vector<std::pair<std::string, Tensor>> tensors() const;
  // Copies `entries` (name -> tensor, the names above prefixed by `prefix`) into the state after
  // checking that every one is present, fp32-convertible and of the right shape. Throws
  // std::invalid_argument naming the tensor: "FP8 scaling state 'fc1.fp8_input_amax_history' has
  // shape [16] but this model's is [1024] (amax history length)".
  void load(const std::vector<std::pair<std::string, Tensor>>& entries, const std::string& prefix);

 private:
  void bump_versions() const;  // after writing the state tensors through raw pointers
  DType dtype_;
  AmaxComputeAlgo algo_;
  int margin_;
  Tensor history_, scale_, scale_inv_;
  float prev_scale_ = 1.0f, prev_scale_inv_ = 1.0f;
};

}  // namespace mixp::amp
