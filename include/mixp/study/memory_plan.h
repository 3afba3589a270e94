// `mixp plan`: the peak memory of a training configuration, split into what holds it, and its
// step time, before running it (issue 15).
//
// How (docs/plan.md): the persistent part is counted from the model's parameters and the
// recipe's formats (study/step_counts.h step_precision): parameters, gradients, master weights,
// optimizer states, and the weight copies cast to the compute format once per step. The part that
// scales with the batch (activations, logits, workspaces) is measured, not guessed: the plan
// trains two probes of the same configuration with 1 and 2 transformer blocks for two steps each
// (the second step has the optimizer states) and takes each probe's peak tensor memory and median
// step time; a block adds the same bytes and time wherever it sits, so the full model's peak and
// step time are probe1 + (layers - 1) x (probe2 - probe1). Models without blocks (mlp, cnn) are
// their own probe. The probes cost about 2/layers of one real step each, plus initialization.
//
// ZeRO (DeepSpeed's stages over `ranks` data-parallel processes): stage 1 divides the optimizer
// states (and master weights) by ranks, stage 2 the gradients too, stage 3 the parameters too;
// ranks > 1 adds an all-reduce bucket of 25 MiB (PyTorch DDP's default bucket_cap_mb) for the
// gradients. mixp itself trains on one process: for ranks > 1 the plan is a projection.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "mixp/study/model_shape.h"
#include "mixp/train/train_config.h"

namespace mixp::study {

struct PlanOptions {
  int zero_stage = 0;  // 0..3
  int ranks = 1;       // data-parallel processes (>= 1)
  // The GEMM throughput behind the step-time estimate (study/step_time.h): measured now (false)
  // or taken from the saved `mixp bench gemm` record when it has the row (true).
  bool gemm_from_record = false;
  bool estimate_time = true;  // false: no GEMM measurement, estimated_step_ms stays 0
};

struct MemoryPlan {
  std::string model, precision;
  int64_t parameters = 0;          // trainable values of the full model
  int64_t layers = 0;              // transformer blocks (0 for mlp, cnn)
  int64_t batch = 0, context = 0;  // per micro-batch; context 0 for image models
  bool checkpointing = false;
  // train_config.h optimizer_in_backward: the gradients are not persistent (grad_bytes 0); the
  // probes' measured rest holds those alive at the peak.
  bool optimizer_in_backward = false;
  // Bytes per device.
  int64_t param_bytes = 0;
  int64_t grad_bytes = 0;
  int64_t master_bytes = 0;      // fp32 master weights when the parameters are narrower
  int64_t state_bytes = 0;       // optimizer states (Adam m and v, SGD momentum)
  int64_t cast_copy_bytes = 0;   // weights cast to the compute format once per step
  int64_t comm_bytes = 0;        // all-reduce buffer (ranks > 1)
  int64_t activation_bytes = 0;  // the measured rest: activations, logits, workspaces
  int64_t peak_bytes = 0;        // the sum: the planned peak tensor memory
  double step_ms = 0;            // the probes' measured step, extrapolated (0 for plan_shape)
  double step_flops = 0;         // 6 x parameters x tokens + attention, per optimizer step
  // The step-time estimate from measured GEMM throughput (study/step_time.h).
  double gemm_flops = 0;         // the matrix products' FLOPs per optimizer step
  double estimated_step_ms = 0;  // gemm_flops / gemm_gflops x the non-GEMM factor
  double gemm_gflops = 0;        // this machine's GEMM throughput in the compute format
  double non_gemm_factor = 0;    // the allowance (study/step_time.h)
  std::string gemm_dtype, gemm_source;
  // The analytic memory model (study/model_shape.h) for transformer models: the whole plan for
  // plan_shape; next to the probes' numbers for plan_memory (0 for mlp and cnn).
  bool analytic = false;  // true: the breakdown above is the analytic model's
  int64_t analytic_activation_bytes = 0;
  int64_t analytic_peak_bytes = 0;
  int zero_stage = 0, ranks = 1;
  // The probes measured: {layers, peak tensor bytes, ms per step}.
  // LoRA / QLoRA (TrainConfig::lora, docs/lora.md): only the adapters train; `parameters` is
  // still the full model's (4-bit weights counted as their values) and `trainable` the adapters'.
  // The persistent rows then come from the probes' own tensors: param_bytes is every stored
  // tensor (the frozen base in its format, 4-bit codes and scales included, and the adapters),
  // gradients, master weights, optimizer states and cast copies count the adapters only.
  bool lora = false;
  int64_t trainable = 0;
  struct Probe {
    int64_t layers = 0, peak_bytes = 0, params = 0;
    double ms = 0;
    int64_t trainable = 0;     // values of the parameters that require a gradient
    int64_t stored_bytes = 0;  // bytes of every parameter and buffer of the model
  };
  std::vector<Probe> probes;
};

// Plans `config` (as `mixp train` would run it: model, data, batch, precision, checkpointing,
// optimizer, grad-accum, threads). Throws train::ConfigError for a bad configuration or options.
MemoryPlan plan_memory(const train::TrainConfig& config, const PlanOptions& options = {});

// What to plan for a shape mixp does not run (plan_shape): `batch` sequences of `seq` tokens,
// `micro_batches` per optimizer step, with a recipe (`mixp train --precision` names) and
// optimizer.
struct ShapeRun {
  int64_t batch = 1, seq = 1024;
  int64_t micro_batches = 1;
  std::string precision = "fp32";
  std::string optimizer = "adamw";
  bool checkpointing = false;
  bool optimizer_in_backward = false;  // train_config.h
  int threads = 0;                     // for the GEMM measurement
  // LoRA adapters (the --lora spec; study/lora_memory.h prices them); required by qlora-*.
  std::string lora = {};
  // Gradients (and ZeRO 3's parameters) on the wire, as mixp train --grad-comm: with bf16/fp16
  // over fp32 parameters ZeRO 3 keeps no autocast copy between a unit's uses.
  std::string grad_comm = "fp32";
};

// The analytic plan of a shape (LLaMA-7B, GPT-3 175B, or explicit): every row from
// study::analytic_memory, the step time from measured GEMM throughput; no probe runs, so it works
// for models far larger than this machine's memory. Throws train::ConfigError for a bad shape,
// recipe or options.
MemoryPlan plan_shape(const ModelShape& shape, const ShapeRun& run,
                      const PlanOptions& options = {});

// The memory model's formats for a recipe and optimizer (what analytic_memory prices), with or
// without checkpointing (autocast keeps no weight shadows under it: MemoryFormats::casts_per_use).
MemoryFormats memory_formats(std::string_view precision, std::string_view optimizer,
                             bool checkpointing = false);

}  // namespace mixp::study
