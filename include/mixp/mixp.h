// Umbrella header: includes every public header, so `#include <mixp/mixp.h>` is the whole API.
// Includes only (docs/architecture.md 6.9). Modules with their own umbrella (nn, optim, quant) come
// in through it; tests/umbrella checks that every header under include/mixp is reachable from here.
#pragma once

// Formats and tensors.
#include "mixp/format/block.h"
#include "mixp/format/block_int4.h"
#include "mixp/format/block_int8.h"
#include "mixp/format/block_mx.h"
#include "mixp/format/block_tensor.h"
#include "mixp/format/convert.h"
#include "mixp/format/describe.h"
#include "mixp/format/dtype.h"
#include "mixp/format/float_codec.h"
#include "mixp/format/minifloat.h"
#include "mixp/format/rounding.h"
#include "mixp/tensor/allocator.h"
#include "mixp/tensor/device.h"
#include "mixp/tensor/element.h"
#include "mixp/tensor/factories.h"
#include "mixp/tensor/generator.h"
#include "mixp/tensor/shape.h"
#include "mixp/tensor/tensor.h"

// Backends and ops.
#include "mixp/backend/backend.h"
#include "mixp/backend/cuda.h"
#include "mixp/backend/gemm.h"
#include "mixp/backend/kernel_observer.h"
#include "mixp/backend/platform.h"
#include "mixp/format/cpu_features.h"
#include "mixp/ops/matmul_precision.h"
#include "mixp/ops/op_list.h"
#include "mixp/ops/ops.h"

// Autograd, modules, optimizers.
#include "mixp/autograd/checkpoint.h"
#include "mixp/autograd/grad_mode.h"
#include "mixp/autograd/grad_ready_hook.h"
#include "mixp/autograd/gradcheck.h"
#include "mixp/autograd/node.h"
#include "mixp/nn/nn.h"
#include "mixp/optim/optim.h"

// Mixed precision: autocast, loss scaling, per-layer precision, FP8.
#include "mixp/amp/amp.h"
#include "mixp/amp/autocast.h"
#include "mixp/amp/cast_policy.h"
#include "mixp/amp/fp8_linear.h"
#include "mixp/amp/fp8_quantize.h"
#include "mixp/amp/fp8_scaling.h"
#include "mixp/amp/grad_scaler.h"
#include "mixp/amp/layer_precision.h"
#include "mixp/amp/policy.h"
#include "mixp/amp/tf32.h"

// Quantization: observers, QAT/PTQ, int8 inference, weight-only.
#include "mixp/quant/quant.h"

// Data, checkpoints and files.
#include "mixp/data/batch_sampler.h"
#include "mixp/data/check_finite.h"
#include "mixp/data/error.h"
#include "mixp/data/idx.h"
#include "mixp/data/image_dataset.h"
#include "mixp/data/random.h"
#include "mixp/data/text_corpus.h"
#include "mixp/data/token_file.h"
#include "mixp/io/atomic_file.h"
#include "mixp/io/convert_safetensors.h"
#include "mixp/io/manifest.h"
#include "mixp/io/quantized_safetensors.h"
#include "mixp/io/safetensors.h"

// Data parallelism (docs/distributed.md).
#include "mixp/dist/grad_reduce.h"
#include "mixp/dist/process_group.h"

// Training.
#include "mixp/train/build_run.h"
#include "mixp/train/callbacks.h"
#include "mixp/train/checkpoint.h"
#include "mixp/train/data_parallel.h"
#include "mixp/train/data_source.h"
#include "mixp/train/energy_meter.h"
#include "mixp/train/fp8_recipe.h"
#include "mixp/train/inspect_callback.h"
#include "mixp/train/metrics.h"
#include "mixp/train/quantize_checkpoint.h"
#include "mixp/train/recipe.h"
#include "mixp/train/recipe_registry.h"
#include "mixp/train/tensor_dataset.h"
#include "mixp/train/train_config.h"
#include "mixp/train/trainer.h"

// Looking inside a run: tensor statistics, NaN/Inf origin, the op profiler.
#include "mixp/inspect/advisor.h"
#include "mixp/inspect/anomaly.h"
#include "mixp/inspect/inspect_report.h"
#include "mixp/inspect/inspect_spec.h"
#include "mixp/inspect/module_tracker.h"
#include "mixp/inspect/profiler.h"
#include "mixp/inspect/tensor_inspector.h"
#include "mixp/inspect/tensor_stats.h"

// Measurement: GEMM benchmarks, instruction peaks, precision studies.
#include "mixp/bench/bench_record.h"
#include "mixp/bench/gemm_bench.h"
#include "mixp/bench/peak.h"
#include "mixp/study/advise.h"
#include "mixp/study/energy_meter.h"
#include "mixp/study/energy_model.h"
#include "mixp/study/memory_plan.h"
#include "mixp/study/model_shape.h"
#include "mixp/study/report.h"
#include "mixp/study/run_record.h"
#include "mixp/study/step_counts.h"
#include "mixp/study/step_time.h"
#include "mixp/study/study_results.h"
#include "mixp/study/study_runner.h"
#include "mixp/study/verdict.h"
