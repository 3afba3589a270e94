// The memory planner (study/memory_plan.h).
#include "mixp/study/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>

#include "mixp/format/dtype.h"
#include "mixp/nn/gpt.h"
#include "mixp/nn/linear.h"
#include "mixp/nn/models.h"
#include "mixp/study/step_counts.h"
#include "mixp/train/build_run.h"
#include "mixp/train/trainer.h"

namespace mixp::study {

namespace {

constexpr int64_t kDdpBucketBytes = 25ll << 20;  // PyTorch DDP's bucket_cap_mb default

int64_t bytes_of(DType d) {
  return traits(d).storage_bytes;
}

MemoryPlan::Probe run_probe(const train::TrainConfig& base, int64_t layers) {
  train::TrainConfig c = base;
  if (layers > 0) c.model.layers = layers;
  c.steps = 2;  // the second step has the optimizer states and the previous step's gradients
  c.epochs = 0;
  c.evaluate = false;
  c.save_dir.clear();
  c.save_every = 0;
  c.resume_dir.clear();
  c.log_path.clear();
  c.init_from.clear();
  train::Trainer t(c);
  const train::TrainResult r = t.fit();
  return {.layers = layers,
          .peak_bytes = r.peak_memory_bytes,
          .params = r.parameters,
          .ms = r.ms_per_step};
}

}  // namespace

MemoryPlan plan_memory(const train::TrainConfig& config, const PlanOptions& opt) {
  if (opt.zero_stage < 0 || opt.zero_stage > 3) {
    throw train::ConfigError(
        fmt::format("--zero-stage must be 0, 1, 2 or 3, got {}", opt.zero_stage));
  }
  if (opt.ranks < 1)
    throw train::ConfigError(fmt::format("--ranks must be >= 1, got {}", opt.ranks));
  train::TrainConfig c = config.resolved();
  if (!c.resume_dir.empty()) throw train::ConfigError("mixp plan plans a fresh run, not --resume");
  const bool lm = train::is_language_model(c.model.name);

  MemoryPlan p;
  p.model = c.model.name;
  p.precision = c.precision;
  p.batch = c.batch;
  p.checkpointing = c.model.checkpointing;
  p.zero_stage = opt.zero_stage;
  p.ranks = opt.ranks;

  // Probes first: they also settle the vocabulary (from the data) and the context.
  std::vector<MemoryPlan::Probe> probes;
  const nn::ModelConfig shape = nn::resolve_model_config(c.model);
  if (lm) {
    p.layers = shape.layers;
    probes.push_back(run_probe(c, 1));
    if (shape.layers > 1) probes.push_back(run_probe(c, 2));
  } else {
    probes.push_back(run_probe(c, 0));
  }
  p.probes = probes;
  const auto& p1 = probes.front();
  const auto& p2 = probes.back();
  const int64_t extra = lm ? shape.layers - 1 : 0;
  const int64_t measured = p1.peak_bytes + extra * (p2.peak_bytes - p1.peak_bytes);
  // A block never takes negative time; on a loaded machine the 2-block probe can step faster
  // than the 1-block one, so the per-block time is clamped at 0 (docs/plan.md).
  p.step_ms = p1.ms + double(extra) * std::max(0.0, p2.ms - p1.ms);

  // The full model's parameters: a block adds the same number wherever it sits, so they come
  // from the probes too; the GEMM weights (what autocast casts) from the shape. The data settles
  // the vocabulary and context (build_run without a model only loads it).
  train::TrainConfig full = c;
  full.save_dir.clear();
  full.log_path.clear();
  full.init_from.clear();
  const train::RunParts parts =
      train::build_run(full, train::RunPurpose::train, /*with_model=*/!lm);
  int64_t gemm_params = 0;
  if (lm) {
    p.parameters = p1.params + extra * (p2.params - p1.params);
    const nn::GptConfig g = nn::gpt_config_of(parts.config.model);
    p.context = g.context;
    gemm_params = g.layers * (4 * g.width * g.width + 2 * g.width * g.mlp_width) +
                  (g.padded_vocab > 0 ? g.padded_vocab : g.vocab) * g.width;
  } else {
    p.parameters = parts.model->num_parameters();
    for (auto& [name, m] : parts.model->named_modules()) {
      if (auto* l = dynamic_cast<nn::Linear*>(m)) gemm_params += l->weight().numel();
    }
  }

  const StepPrecision sp = step_precision(c.precision, c.optimizer);
  const train::RecipeDtypes d = parts.recipe->dtypes();
  const int64_t P = p.parameters;
  const int64_t R = opt.ranks;
  auto shard = [&](int64_t bytes, int from_stage) {
    return opt.zero_stage >= from_stage ? (bytes + R - 1) / R : bytes;
  };
  p.param_bytes = P * bytes_of(d.params);
  p.grad_bytes = P * bytes_of(sp.grad);
  p.master_bytes = d.master != d.params ? P * bytes_of(d.master) : 0;
  p.state_bytes = P * sp.states * bytes_of(sp.state);
  p.cast_copy_bytes = sp.casts_weights ? gemm_params * bytes_of(sp.compute) : 0;
  // What the probes measured beyond the persistent tensors (one process, no ZeRO).
  const int64_t persistent =
      p.param_bytes + p.grad_bytes + p.master_bytes + p.state_bytes + p.cast_copy_bytes;
  p.activation_bytes = std::max<int64_t>(0, measured - persistent);
  p.param_bytes = shard(p.param_bytes, 3);
  p.grad_bytes = shard(p.grad_bytes, 2);
  p.master_bytes = shard(p.master_bytes, 1);
  p.state_bytes = shard(p.state_bytes, 1);
  p.comm_bytes = R > 1 ? std::min<int64_t>(kDdpBucketBytes, P * bytes_of(sp.grad)) : 0;
  p.peak_bytes = p.param_bytes + p.grad_bytes + p.master_bytes + p.state_bytes + p.cast_copy_bytes +
                 p.comm_bytes + p.activation_bytes;

  const double tokens = double(c.batch) * double(c.grad_accum) * (lm ? double(p.context) : 1.0);
  p.step_flops = 6.0 * double(P) * tokens;
  if (lm) {
    // Attention's two batched GEMMs (QK^T and PV), forward and backward, causal or not: 12 L T C.
    p.step_flops += 12.0 * double(shape.layers) * double(p.context) * double(shape.width) * tokens;
  }
  return p;
}

}  // namespace mixp::study
