// Will a training run fit in memory? Asked before training starts (`mixp train`, issue 28 item
// 8), so that "--batch 100000000" is refused with what it needs instead of failing with
// std::bad_alloc (or being killed) in the middle of its first step.
//
// The planner (memory_plan.h) without its probes, which would themselves need the memory: for
// the transformer models (gpt, gpt2) the analytic model of plan_shape, checked against the probes
// (docs/plan.md); for mlp and cnn the persistent tensors (parameters, gradients, master weights,
// optimizer states and cast copies, priced by memory_formats) plus, per sample, every traced
// GEMM's output and the first layer's input (study/step_counts.h trace_step_gemms). The mlp/cnn
// activation count leaves out what is not a GEMM operand (ReLU outputs, pooling indices): an
// underestimate, so that the check never refuses a run that fits.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "mixp/train/train_config.h"

namespace mixp::study {

struct MemoryNeed {
  int64_t peak_bytes = 0;        // the planned peak tensor memory of one step
  int64_t persistent_bytes = 0;  // parameters, gradients, master weights, states, cast copies
  int64_t activation_bytes = 0;  // the rest: what scales with the batch
};

// The planned need of `config` (TrainConfig::resolved(): the model's defaults, so the default
// vocabulary of the language models, which the data does not change by much: gpt2's is fixed,
// gpt's text has at most 256 byte values). Asked before the Trainer is built, because building it
// already allocates the batch-sized input buffers (train/batch_source.cpp), which the first GEMM's
// input term counts. No step is run. Throws train::ConfigError for a precision or optimizer the
// planner does not know, and std::bad_alloc when even the model cannot be built (mlp, cnn).
MemoryNeed plan_training_memory(const train::TrainConfig& config);

// The memory a new allocation can get: MemAvailable from /proc/meminfo, or this process's
// cgroup's remaining limit (memory.max - memory.current, cgroup v2; limit - usage, v1) when that
// is lower. 0 when neither can be read.
uint64_t available_memory_bytes();

// One line when `need` does not fit in `available` bytes, naming what needs how much for which
// run, e.g. "needs 745.1 GiB for training mlp (batch 100000000, fp32): 745.1 GiB of activations
// and 2.6 MiB of parameters, gradients and optimizer states; 12.3 GiB available"; nullopt when it
// fits or when available is 0 (unknown).
std::optional<std::string> memory_shortfall(const train::TrainConfig& config,
                                            const MemoryNeed& need, uint64_t available);

}  // namespace mixp::study
