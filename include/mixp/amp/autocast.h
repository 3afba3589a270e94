// Autocast: run each op in the dtype its cast policy (cast_policy.h) asks for, PyTorch-style, as
// an RAII guard (what libtorch users ask for in pytorch issue 44710).
//
//   {
//     amp::Autocast ac(DType::bf16);          // or DType::fp16 (fp16 works on the CPU too)
//     Tensor logits = model.forward(x);       // linear/conv/matmul/attention run in bf16
//     Tensor loss = cross_entropy(logits, y); // the loss runs in fp32
//   }                                          // cast cache cleared here
//   loss.backward();                           // gradients reach the fp32 weights
//
// Semantics (they follow torch.autocast):
//  - Thread-local: a guard affects ops on the thread that made it, nothing else. The engine's
//    hook (ops.h, set_cast_policy_hook) is installed process-wide the first time a guard is made
//    and stays installed; it does nothing on threads with no enabled region.
//  - Nestable: a guard saves the state it replaces and restores it on destruction. An inner
//    guard may change the dtype (Autocast(DType::fp16) inside a bf16 region) or disable autocast
//    (Autocast(DType::bf16, /*enabled=*/false), PyTorch's autocast(enabled=False)): ops inside
//    then see their inputs as they are; cast what comes from the outer region to fp32 yourself
//    if the inner code needs it (as in PyTorch).
//  - Per-layer overrides (recipes): nest a guard around one module's forward, e.g.
//        { amp::Autocast keep_fp32(DType::bf16, false); x = head.forward(x.to(DType::fp32)); }
//        { amp::Autocast fp16(DType::fp16); x = mlp.forward(x); }
//    The enabled/dtype state is per guard; the cast cache belongs to the outermost region.
//  - Backward runs outside autocast (the engine suspends the hook): each backward function runs
//    in the dtypes its forward chose. Wrap only the forward pass and the loss.
//  - The cast cache: the low-precision copy of an fp32 leaf that requires grad (a weight) is made
//    once per (tensor, dtype) in the outermost region and reused by every later op in it, so a
//    weight used by several ops (tied embeddings, a weight shared across timesteps) is converted
//    once. The copy is made with the differentiable Tensor::to, so the gradients of all its uses
//    add up and flow back to the fp32 weight. The cache is cleared when the outermost guard is
//    destroyed (also when it was disabled): weights updated by the optimizer between regions are
//    re-converted. Do not step the optimizer inside a region (the copies would be stale).
//    A copy made under NoGradGuard has no history; a later use with grad mode on re-converts.
//  - Weight shadows (on by default; set_weight_shadows): the copy made for a weight stays attached
//    to it after the region (amp's cache, weight_shadow.h). An optimizer step rewrites it from the new
//    weight in the same pass (bit for bit the cast), and the next region takes it instead of
//    converting again. A shadow is used only while the weight's version counter is unchanged since
//    it was written, so any other write (copy_, load_state_dict, ...) makes the next region cast
//    afresh. The cost: the low-precision copies stay allocated between steps, which raises the
//    peak where it lies after backward (docs/amp.md, "Weight shadows").
//  - Casts round to nearest even (Overflow::ieee: fp32 values beyond fp16's range become inf,
//    as in PyTorch; GradScaler exists for the gradients).
//  - Beyond PyTorch, opt-in: low_precision_norm_saves makes layer_norm (fp32 by policy) keep its
//    normalized input for backward in the region's dtype instead of its fp32 input (see the
//    option below). The forward is unchanged; only what backward reads is rounded.
#pragma once
#include <cstdint>

#include "mixp/amp/cast_policy.h"
#include "mixp/amp/weight_shadow.h"
#include "mixp/format/dtype.h"
#include "mixp/format/rounding.h"
#include "mixp/tensor/tensor.h"

namespace mixp::amp {

// How autocast rounds its casts; optimizers write weight shadows by the same rule (backend.h
// kShadowRound, checked equal in src/amp/weight_shadow.cpp), so both give the same bits.
inline constexpr Round kAutocastRound = Round::nearest_even;
inline constexpr Overflow kAutocastOverflow = Overflow::ieee;

struct AutocastOptions {
  DType dtype = DType::bf16;  // bf16 or fp16
  bool enabled = true;
  bool cache_enabled = true;  // PyTorch's cache_enabled
  // layer_norm keeps xhat = (x - mean) * rstd rounded to `dtype` (and rstd in fp32) for its
  // backward instead of its fp32 input x (src/ops/layer_norm_saved.h). In a transformer x is the
  // fp32 residual stream (fp32 + bf16 promotes, as in PyTorch), the one activation autocast would
  // otherwise leave in fp32: this halves it. Costs one 16-bit rounding of xhat in the backward's
  // inputs, like the 16-bit GEMM inputs the linears already save. Off = PyTorch's behaviour.
  // Nested guards made with Autocast(dtype, enabled) keep the enclosing region's setting.
  bool low_precision_norm_saves = false;
  // Weight shadows in this region (docs/amp.md, "Weight shadows"), when the process-wide switch
  // (set_weight_shadows) is on too. false: the region casts each weight itself (once per region,
  // through the cast cache) and attaches no shadow, so the low-precision copies live only while
  // the region's cache and the graph hold them, as in PyTorch; a checkpointed segment's
  // recomputation casts again. The recipes turn them off under gradient checkpointing, whose
  // peak is the end of backward, where the shadows would be the only copies alive.
  // Results are bit for bit the same either way. Nested guards made with Autocast(dtype,
  // enabled) keep the enclosing region's setting.
  bool weight_shadows = true;
};

class Autocast {
 public:
  // dtype must be bf16 or fp16 (std::invalid_argument otherwise), even when disabled.
  explicit Autocast(DType dtype = DType::bf16, bool enabled = true);
  explicit Autocast(const AutocastOptions& options);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;
  Autocast(Autocast&&) = delete;
  Autocast& operator=(Autocast&&) = delete;

 private:
  AutocastOptions prev_;
};

// The state of this thread: whether ops are autocast now, and to which dtype (the innermost
// guard's; bf16 when there is none).
bool is_autocast_enabled();
DType autocast_dtype();
bool is_autocast_cache_enabled();
// All of it, for code that re-enters the state later (gradient checkpointing's recomputation).
AutocastOptions autocast_options();
// Guards alive on this thread (enabled or not); the cache lives while this is > 0.
int autocast_nesting();
// Whether autocast, as it stands on this thread now, would give op `op` the weight `w` (an fp32
// leaf that requires grad) as its 16-bit copy without reading w's values: the op's policy lowers
// it to autocast_dtype(), through the region's cache and w's weight shadow
// (amp/weight_shadow.h), which a caller that attaches a current shadow of that dtype first
// provides. ZeRO 3 then gathers only that copy for a head's forward (train/trainer_zero3.cpp).
bool autocast_reads_shadow(OpId op, const Tensor& w);

// Cast-cache counters of this thread since the last reset: a hit reuses the region's copy, a
// miss makes one, by converting or (shadow_hits, counted among the misses too) from the weight's
// shadow without converting.
struct AutocastCacheStats {
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t entries = 0;      // copies held now
  int64_t shadow_hits = 0;  // misses served by a current weight shadow
};
AutocastCacheStats autocast_cache_stats();
void reset_autocast_cache_stats();
// Weight shadows on (default) or off, process-wide. Off: autocast neither uses nor attaches them,
// and optimizers drop the ones they meet instead of updating them (their memory is freed then).
// Results are the same either way (bit for bit); off trades the memory of the low-precision weight
// copies between steps for one conversion of every weight per region.
// (set_weight_shadows and weight_shadows_enabled are declared with the cache, weight_shadow.h.)
// Drops this thread's cached copies now (torch.clear_autocast_cache); the guard does it on exit.
void clear_autocast_cache();

// What the hook does to one op's inputs under the given state, exposed for tests and for code
// that wants the policy without a guard: casts entries of `inputs` in place per
// cast_policy(op, dtype). Uses (and fills) this thread's cache when use_cache is true.
void apply_autocast(OpId op, std::span<Tensor> inputs, DType dtype, bool use_cache);

}  // namespace mixp::amp
