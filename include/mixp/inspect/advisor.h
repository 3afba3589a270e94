// The layer-precision advisor's decision (`mixp advise`, docs/inspect.md "The advisor"): from the
// tensor statistics of a short fp32 or bf16 run (tensor_inspector.h records), which formats each
// Linear layer's tensors fit, the rule and the numbers that decide it, and the --layer-precision
// rules that follow. Pure logic on the records; the runs that produce the statistics and verify the
// proposal are mixp/study/advise.h.
//
// Per Linear layer (kinds "linear" and "head": the layers an FP8 recipe can put in FP8), over every
// inspected step, the worst of:
//   forward tensors  its output activation and its weight;
//   gradient         the gradient arriving at its output (what an FP8 layer quantizes to E5M2).
// The rules, in order; the first that fires decides:
//   nonfinite     a NaN/inf in any of its tensors                          -> fp32
//   bf16-overflow a forward tensor or the gradient overflows bf16          -> fp32
//   bf16-error    a forward tensor's bf16 mse / rms^2 > max_bf16_rel_mse   -> fp32
//   head          the model's output layer (its errors go straight into the loss; TE users and
//                 the seeds keep it in high precision)                    -> bf16
//   fp8-flush     statistics of an FP8 run (role fp8-operand): a per-tensor FP8 cast of one of
//                 its GEMM operands flushed more than max_fp8_flush of the operand's nonzero
//                 values to zero at the scale it used (a stale amax, e.g. an early large
//                 gradient kept by a long amax history; step 1 is not counted: delayed
//                 scaling casts it with the initial scale 1)            -> bf16, with the advice
//                 of a shorter amax history, fp8-current, or bf16 for the layer
//   fp8-underflow a forward tensor's mxfp8 underflow fraction > max_fp8_underflow: values a scale
//                 per block of 32 still flushes, so a per-tensor scale flushes at least those
//                                                                          -> bf16
//   fp8-error     a forward tensor's mxfp8 mse / rms^2 > max_fp8_rel_mse   -> bf16
//   grad-range    the gradient's dynamic range > max_grad_range binades: more than E5M2 spans
//                 under one per-tensor scale (2^-16 .. 57344)              -> bf16
//   fits-fp8      none of the above                                       -> fp8
// fp16 is reported (fits_fp16: no forward overflow, nothing non-finite) but not proposed: bf16 has
// fp32's range at the same cost on CPU and needs no loss scaling.
#pragma once
#include <string>
#include <vector>

#include "mixp/inspect/tensor_inspector.h"

namespace mixp::inspect {

enum class LayerFormat : uint8_t { fp8, bf16, fp32 };
const char* to_string(LayerFormat f);

// The limits of the rules above. Defaults: docs/inspect.md "The advisor" says where they come from.
struct AdviceThresholds {
  double max_bf16_rel_mse = 1e-4;   // bf16 alone gives ~2^-18 / 3 ~ 1e-6 on normal values
  double max_fp8_underflow = 0.01;  // 1% of the values
  double max_fp8_rel_mse = 5e-3;    // E4M3's 3 mantissa bits alone give ~2^-8 / 3 ~ 1.3e-3
  double max_grad_range = 31;       // E5M2: 2^-16 (smallest subnormal) .. 57344 ~ 2^15.8
  double max_fp8_flush = 0.01;      // 1% of an FP8 operand's nonzero values flushed by its cast
};

// The worst numbers of one layer over its inspected steps. Relative MSE = mse / rms^2.
struct LayerNumbers {
  int64_t nonfinite = 0;            // NaN + inf in any tensor
  double fp16_overflow = 0;         // forward tensors
  double bf16_overflow = 0;         // forward tensors and the gradient
  double bf16_rel_mse = 0;          // forward tensors
  double fp8_underflow = 0;         // mxfp8, forward tensors
  double fp8_rel_mse = 0;           // mxfp8, forward tensors
  double e4m3_overflow = 0;         // fp8_e4m3 unscaled, forward tensors (why FP8 needs a scale)
  double grad_range = 0;            // binades of the gradient at the output
  double grad_fp16_underflow = 0;   // the gradient in fp16 at the run's loss scale
  std::string worst_fp8_tensor;     // the forward tensor with the largest mxfp8 rel MSE
  // fp8-operand records (an FP8 run's statistics): the largest share of an operand's nonzero
  // values that its cast flushed to zero, which operand ("grad_output"), its format and step.
  double fp8_flush = 0;
  std::string fp8_flush_operand, fp8_flush_format;
  int64_t fp8_flush_step = 0;
};

struct LayerAdvice {
  std::string module, kind;
  int64_t weight_numel = 0;  // its weight's values: its share of the Linear GEMMs' FLOPs
  LayerNumbers numbers;
  bool fits_fp16 = false, fits_bf16 = false, fits_fp8 = false;
  LayerFormat choice = LayerFormat::fp32;
  std::string rule;    // the rule that decided (names above)
  std::string reason;  // the deciding number against its limit, in words
};

// One entry per Linear layer found in `records` (in the order first seen). Throws InspectError
// when the records hold no Linear layer with an activation record (a statistics file without
// roles=activation, or of a model without Linear layers).
std::vector<LayerAdvice> advise_layers(const std::vector<StatRecord>& records,
                                       const AdviceThresholds& limits = {});

// --layer-precision for an FP8 recipe: each layer not in fp8 by name with its format, then `*=fp8`
// (the rest). "" when no layer fits fp8.
std::string fp8_layer_rules(const std::vector<LayerAdvice>& layers);
// --layer-precision for the bf16 recipe: the layers that must stay fp32 ("" when none).
std::string bf16_layer_rules(const std::vector<LayerAdvice>& layers);

}  // namespace mixp::inspect
