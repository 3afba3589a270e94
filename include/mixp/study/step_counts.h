// What one training step of a model costs in counted operations, for the energy estimate
// (energy_model.h) of runs where no energy counter can be read.
//
// Two parts:
//
// 1. trace_step_gemms(model, ...) finds the model's matrix products from its layers' shapes: the
//    forward GEMM of every Linear and Conv2d (im2col: M = batch * out_h * out_w, N = out
//    channels, K = in channels * kh * kw) and, for the GPT, the two attention products per head
//    (S = Q K^T: T x T x D, O = P V: T x D x T). Sequential models (mlp, cnn) are traced by
//    running each child once on a one-sample input (eval mode, so no statistics change), which
//    gives every layer's input and output shape; the GPT is counted from its configuration.
//
// 2. count_training_step(gemms, parameters, precision) prices one optimizer step:
//    - every forward GEMM in the compute format, plus its backward: dA = dC B^T when A needs a
//      gradient (not for the first layer, whose input is data) and dB = A^T dC (the weight
//      gradient, or for attention the gradient of K or V), so a linear layer costs 3x its forward
//      multiply-adds (2x for the first layer) and attention 3x. Checkpointed blocks add their
//      forward again (recomputation). Each GEMM moves its operands and result once through DRAM
//      at the compute format's size (count_matmul): this is where activations and the
//      (low-precision copies of the) weights are counted;
//    - the optimizer: per trained value, read the parameter and its gradient, read and write each
//      optimizer state, write the parameter (AdamW/Adam: 2 states, SGD with momentum: 1), at
//      the parameter, gradient and state formats' sizes;
//    - mixed recipes with fp32 master weights: once per forward pass (micro-batch), each weight is
//      read in fp32 and written in the compute format (the cast the GEMMs then read).
//    Not counted: bias adds, activations functions, normalisation, softmax, losses, embedding
//    lookups, data loading (elementwise work is small next to the GEMMs on these models).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mixp/format/dtype.h"
#include "mixp/nn/models.h"
#include "mixp/study/energy_model.h"
#include "mixp/train/recipe.h"

namespace mixp::nn {
class Module;
}

namespace mixp::study {

// One forward matrix product C[m x n] = A[m x k] * B[k x n], `count` times (attention: once per
// sample and head), with the batch already in m.
struct StepGemm {
  std::string layer;  // the module's dotted name, e.g. "fc1", "blocks.0.attn (scores)"
  int64_t m = 0, n = 0, k = 0;
  int64_t count = 1;
  bool a_grad = true;  // backward computes dA (false when A is the data)
  bool b_grad = true;  // backward computes dB (a trained weight, or K / V in attention)
  int recompute = 0;   // extra forward passes in backward (gradient checkpointing)
};

struct StepTrace {
  std::vector<StepGemm> gemms;
  int64_t parameters = 0;                // trained values (the optimizer's work)
  int64_t weight_values = 0;             // values of GEMM weights (cast by mixed recipes)
  std::vector<std::string> not_counted;  // modules with work the trace could not see
};

// The GEMMs of one training step of `model` on a batch of `batch` samples of `sample_shape`
// (without the batch dimension: {1, 28, 28} for an image, {T} for a token sequence; tokens are
// int64). The model must be floating point (fp32 or fp64): it is run once on one sample for
// Sequential models. Throws std::invalid_argument for a non-positive batch.
StepTrace trace_step_gemms(nn::Module& model, const Shape& sample_shape, int64_t batch);

// The same for a built-in model by configuration (mlp, cnn: {1, 28, 28}; gpt: {context} tokens):
// builds an fp32 copy of the model (cheap) and traces it.
StepTrace trace_step_gemms(const nn::ModelConfig& model, int64_t batch);

// The formats a recipe trains in, as the estimate prices them.
struct StepPrecision {
  DType compute = DType::fp32;  // GEMM inputs (and outputs)
  DType param = DType::fp32;    // stored parameters (fp32 master weights for mixed recipes)
  DType grad = DType::fp32;     // gradients the optimizer reads
  DType state = DType::fp32;    // optimizer states
  int states = 2;               // optimizer states per value: AdamW/Adam 2, SGD (momentum) 1
  bool casts_weights = false;   // weights cast from `param` to `compute` once per step
};

// The formats of a recipe as it trains (PrecisionRecipe::dtypes() of the built recipe, so a
// refined spec such as "bf16:compute=fp16" is priced in fp16): GEMMs in `compute`; the optimizer
// reads and writes the `master` copy (fp32 master weights, or the parameters themselves), its
// `grads` and `states`; weights are cast from `master` to `compute` once per forward pass when
// the GEMMs run in a format narrower than fp32 that the master is not in (the Autocast and FP8
// recipes). The registry's table (train/recipe_registry.h, docs/amp-training.md) lists each
// recipe's formats: e.g. int8-qat (fake quantization) is priced as fp32, the FP8 recipes'
// products as fp8 E4M3. `optimizer`: "sgd" has one state, anything else two.
StepPrecision step_precision(const train::RecipeDtypes& dtypes,
                             std::string_view optimizer = "adamw");
// The same for a recipe spec ("bf16", "bf16:compute=fp16"), built with train::make_recipe
// (throws train::ConfigError for an unknown one).
StepPrecision step_precision(std::string_view recipe, std::string_view optimizer = "adamw");

// One optimizer step's counted work (see the top of this file). `micro_batches` (gradient
// accumulation): the GEMMs and weight casts happen once per micro-batch (trace the micro-batch),
// the optimizer once per step.
OpCounts count_training_step(const StepTrace& trace, const StepPrecision& p,
                             int64_t micro_batches = 1, GemmTraffic traffic = {});

}  // namespace mixp::study
