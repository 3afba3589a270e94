// The memory planner (study/memory_plan.h).
#include "mixp/study/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "mixp/format/dtype.h"
#include "mixp/nn/gpt.h"
#include "mixp/nn/linear.h"
#include "mixp/nn/models.h"
#include "mixp/study/lora_memory.h"
#include "mixp/study/memory_check.h"
#include "mixp/study/step_counts.h"
#include "mixp/study/step_time.h"
#include "mixp/train/build_run.h"
#include "mixp/train/fp8_recipe.h"
#include "mixp/train/recipe_registry.h"
#include "mixp/train/trainer.h"

namespace mixp::study {

namespace {

constexpr int64_t kDdpBucketBytes = 25ll << 20;  // PyTorch DDP's bucket_cap_mb default

int64_t bytes_of(DType d) {
  return traits(d).storage_bytes;
}

// ZeRO 3 (docs/distributed.md, "ZeRO stage 3: --zero 3", "Memory"): what a rank holds at its
// peak beyond its shards, as src/train/trainer_zero3.cpp gathers. The peak is in backward
// (zero3_backward_moment), at the head's backward or, with a small vocabulary, at the last
// block's. Gathered then, whole on every rank (its own rows are copied in with the others'):
// the root unit (the final norm: whole from its forward to the end of its backward) and either
// the head's unit (GPT-2's tied wte) or the last block, each as gathered for its backward: the
// autocast copies of its GEMM weights only (which its backward reads, `cast_bytes` a value),
// its other parameters' values; without casts, all its values. Besides, an untied head weight's
// gradient is whole on every rank from the head's backward to its reduction, `grad_bytes` a
// value; a tied one's (GPT-2's wte) is computed at the end of backward (Zero3Units::tied). The
// prefetch (src/train/zero3_prefetch.h) adds no row: the next unit's bytes wait in a wire
// buffer outside the tensor allocator (as the blocking gather's staging buffer did) and reach
// the parameters at the moment the blocking gather would have put them there.
struct Zero3Units {
  int64_t root = 0, head = 0, block = 0;  // parameter values
  int64_t head_gemm = 0, block_gemm = 0;  // GEMM weight values (autocast's casts)
  // A head tied to the token embedding (GPT-2's): its weight gradient is computed when backward
  // reaches the embedding (ops/deferred_weight_grad.h), after the activations are gone, so it
  // is not whole at the head's backward.
  bool tied = false;
};

// `per_use_cast_bytes`: autocast casts the GEMM weights at each use, with no weight shadows
// (--checkpointing): a unit's gather holds its values, and the GEMMs save their 16-bit copies
// beside them.
int64_t zero3_gathered_bytes(const Zero3Units& u, int64_t param_bytes, int64_t cast_bytes,
                             int64_t grad_bytes, int64_t per_use_cast_bytes) {
  auto in_backward = [&](int64_t values, int64_t gemm) {
    return cast_bytes > 0 ? gemm * cast_bytes + (values - gemm) * param_bytes
                          : values * param_bytes + gemm * per_use_cast_bytes;
  };
  return u.root * param_bytes +
         std::max(in_backward(u.head, u.head_gemm), in_backward(u.block, u.block_gemm)) +
         (u.tied ? 0 : u.head_gemm * grad_bytes);
}

// The fraction of the sharded rows the most-loaded rank holds. In stages 1 and 2 the ranks own
// whole parameters, largest first to the least-loaded (train/data_parallel.cpp
// DataParallel::partition), so one rank owns at least the largest parameter: at GPT-2 124M over
// 4 ranks rank 0 owns the tied wte alone, 0.31 of the values rather than 0.25 (docs/distributed.md,
// "Memory"). The plan is for that rank: the one that runs out first. Stage 3 splits every
// parameter by rows (row_piece): an even 1/R. `largest` 0: an even 1/R.
double zero_share(int64_t largest, int64_t total, int64_t ranks, int stage) {
  const double even = 1.0 / double(ranks);
  if (stage >= 3) return even;
  return total > 0 ? std::max(even, double(largest) / double(total)) : even;
}

// The gradients in reduction at the peak: one bucket (PyTorch DDP's 25 MiB). From ZeRO 2 on a
// rank drops the gradients other ranks own as soon as their bucket starts (train/
// data_parallel.cpp start_next_bucket), so what waits beyond its own shard (the gradient row) is
// the others' (R-1)/R of the bucket that is filling. The wire's staging and receive buffers are
// outside the tensor allocator (std::vector, shared memory) and not in peak_memory_bytes.
int64_t comm_bytes(const PlanOptions& opt, int64_t bucket) {
  if (opt.ranks <= 1) return 0;
  return opt.zero_stage >= 2 ? bucket * (opt.ranks - 1) / opt.ranks : bucket;
}

// ZeRO 3 moves the peak. One process (and the probes) peaks at the optimizer step, where the
// whole parameters, gradients and states are held, so the probes' rest beyond them is small.
// With those sharded the larger moment is the start of backward: every block's saved
// activations (the analytic model's, model_shape.h moment (a)) are live while the gradients
// have not come yet, besides the gathered units and the first bucket of gradients. The
// activation row then holds that moment's activations less the gradient row (not yet allocated
// then), so that the rows still add up to the peak. Measured: docs/distributed.md, "Memory".
void zero3_backward_moment(MemoryPlan& p) {
  p.activation_bytes =
      std::max(p.activation_bytes, p.analytic_activation_bytes - p.grad_bytes);
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
  int64_t trainable = 0, stored = 0;
  for (const auto& [name, p] : t.model().named_parameters())
    if (p.requires_grad()) trainable += p.numel();
  for (const auto& [name, v] : t.model().state_dict()) stored += int64_t(v.nbytes());
  return {.layers = layers,
          .peak_bytes = r.peak_memory_bytes,
          .params = r.parameters,
          .ms = r.ms_per_step,
          .trainable = trainable,
          .stored_bytes = stored};
}

// The gradients' format as autograd keeps them: leaves narrower than fp32 accumulate in fp32
// (autograd/node.h grad_dtype_for), whatever format the optimizer then reads.
int64_t grad_bytes_per_value(const train::RecipeDtypes& d, const StepPrecision& sp) {
  return bytes_of(d.params) < 4 ? 4 : bytes_of(sp.grad);
}

// Autocast over fp32 parameters without weight shadows: what the runs do under checkpointing
// (build_run.cpp), so the cast copies are not persistent.
bool casts_per_use(const train::RecipeDtypes& d, const StepPrecision& sp, bool checkpointing) {
  return checkpointing && sp.casts_weights && d.params == DType::fp32 &&
         (d.compute == DType::bf16 || d.compute == DType::fp16);
}

MemoryFormats formats_of(const train::RecipeDtypes& d, const StepPrecision& sp,
                         bool checkpointing) {
  MemoryFormats f;
  f.casts_per_use = casts_per_use(d, sp, checkpointing);
  f.dense_embedding_grad = d.params != DType::fp32;
  f.param_bytes = int(bytes_of(d.params));
  f.master_bytes = d.master != d.params ? int(bytes_of(d.master)) : 0;
  f.grad_bytes = int(grad_bytes_per_value(d, sp));
  f.state_bytes = sp.states * int(bytes_of(sp.state));
  f.cast_bytes = sp.casts_weights ? int(bytes_of(sp.compute)) : 0;
  // Saved activations: the GEMM inputs and norm saves are 16-bit whenever the compute format is
  // narrower than fp32 (autocast's casts, 16-bit norm saves; the FP8 recipes run on the bf16
  // policy and save bf16), else the activations' format.
  const int64_t compute = bytes_of(sp.compute);
  f.save_bytes = compute < 4 ? 2 : int(bytes_of(d.activations));
  f.residual_bytes = int(bytes_of(d.activations));
  return f;
}

// The block-scaled recipes' weight copies (docs/plan.md "Block-scaled recipes"): bits per
// quantized value, the element's codes plus one block scale per weight tile (nvfp4: E4M3 per
// 16x16, or per 16 with 2d=0; mxfp4: E8M0 per 32; fp8-block: fp32 per 128x128), and the blocks
// the recipe keeps in bf16 (bf16_last). nvfp4's per-tensor fp32 (4 bytes a weight) is left out.
void add_block_cast(MemoryFormats& f, const train::PrecisionRecipe& recipe) {
  const auto* r = dynamic_cast<const train::Fp8TrainingRecipe*>(&recipe);
  if (!r) return;
  const amp::Fp8Recipe& q = r->fp8();
  switch (q.scaling) {
    case amp::Fp8Scaling::nvfp4:
      f.block_cast_bits = 4.0 + 8.0 / (q.weight_2d ? 256.0 : 16.0);
      break;
    case amp::Fp8Scaling::mxfp4:
      f.block_cast_bits = 4.0 + 8.0 / 32.0;
      break;
    case amp::Fp8Scaling::fp8_block:
      f.block_cast_bits = 8.0 + 32.0 / (128.0 * 128.0);
      break;
    default:
      return;
  }
  f.bf16_blocks = q.bf16_last;
}

// The model's shape for the analytic model, from the resolved GPT configuration.
ModelShape shape_of(const nn::GptConfig& g) {
  ModelShape s;
  s.name = "custom";
  s.family = ShapeFamily::gpt2;
  s.layers = g.layers;
  s.width = g.width;
  s.heads = g.heads;
  s.ffn = g.mlp_width;
  s.vocab = g.vocab;
  s.padded_vocab = g.padded_vocab > 0 ? g.padded_vocab : g.vocab;
  s.context = g.context;
  return s;
}

void add_estimate(MemoryPlan& p, DType compute, const PlanOptions& opt, int threads) {
  if (!opt.estimate_time || p.gemm_flops <= 0) return;
  const GemmThroughput t = gemm_throughput(compute, opt.gemm_from_record, threads);
  p.gemm_dtype = std::string(name(t.bench_dtype));
  p.gemm_source = t.source;
  p.gemm_gflops = t.gflops;
  p.non_gemm_factor = non_gemm_factor(compute);
  p.estimated_step_ms = estimate_step_ms(p.gemm_flops, t, compute);
}

void check_options(const PlanOptions& opt) {
  if (opt.zero_stage < 0 || opt.zero_stage > 3) {
    throw train::ConfigError(
        fmt::format("--zero-stage must be 0, 1, 2 or 3, got {}", opt.zero_stage));
  }
  if (opt.ranks < 1)
    throw train::ConfigError(fmt::format("--ranks must be >= 1, got {}", opt.ranks));
}

}  // namespace

MemoryFormats memory_formats(std::string_view precision, std::string_view optimizer,
                             bool checkpointing) {
  const auto recipe = train::make_recipe(precision);
  const train::RecipeDtypes d = recipe->dtypes();
  MemoryFormats f = formats_of(d, step_precision(d, optimizer), checkpointing);
  add_block_cast(f, *recipe);
  return f;
}

MemoryPlan plan_memory(const train::TrainConfig& config, const PlanOptions& opt) {
  check_options(opt);
  train::TrainConfig c = config.resolved();
  if (!c.resume_dir.empty()) throw train::ConfigError("mixp plan plans a fresh run, not --resume");
  const bool lm = train::is_language_model(c.model.name);

  MemoryPlan p;
  p.model = c.model.name;
  p.precision = c.precision;
  p.batch = c.batch;
  p.checkpointing = c.model.checkpointing;
  p.optimizer_in_backward = c.optimizer_in_backward;
  p.zero_stage = opt.zero_stage;
  p.ranks = opt.ranks;
  if (c.optimizer_in_backward && (opt.ranks > 1 || opt.zero_stage > 0)) {
    throw train::ConfigError(
        "--optimizer-in-backward runs on one process without ZeRO (mixp train refuses it with "
        "data parallelism); drop --ranks/--zero-stage or --optimizer-in-backward");
  }

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
  int64_t largest = 0;  // values of the largest parameter (zero_share)
  if (lm) {
    p.parameters = p1.params + extra * (p2.params - p1.params);
    const nn::GptConfig g = nn::gpt_config_of(parts.config.model);
    p.context = g.context;
    const int64_t rows = g.padded_vocab > 0 ? g.padded_vocab : g.vocab;
    gemm_params = g.layers * (4 * g.width * g.width + 2 * g.width * g.mlp_width) + rows * g.width;
    largest = std::max(rows * g.width, g.width * g.mlp_width);
  } else {
    p.parameters = parts.model->num_parameters();
    for (auto& [name, m] : parts.model->named_modules()) {
      if (auto* l = dynamic_cast<nn::Linear*>(m)) gemm_params += l->weight().numel();
    }
    for (const auto& [name, t] : parts.model->named_parameters()) {
      largest = std::max(largest, t.numel());
    }
  }

  const StepPrecision sp = step_precision(c.precision, c.optimizer);
  const train::RecipeDtypes d = parts.recipe->dtypes();
  const int64_t P = p.parameters;
  const int64_t R = opt.ranks;
  const double share = zero_share(p.lora ? 0 : largest, P, R, opt.zero_stage);
  auto shard = [&](int64_t bytes, int from_stage) {
    return opt.zero_stage >= from_stage ? int64_t(std::ceil(double(bytes) * share)) : bytes;
  };
  // Under LoRA only the adapters train: their gradients, masters, states and cast copies (every
  // adapter weight is a GEMM weight); the frozen base is stored bytes only (in its format: fp32,
  // or the 4-bit codes and scales under qlora-*), and what its GEMMs hold in backward (the bf16
  // copies autocast saves for the input gradient) is in the measured rest.
  p.lora = !c.lora.empty() || !c.lora_from.empty();
  auto extrapolate = [&](int64_t MemoryPlan::Probe::*f) {
    return p1.*f + extra * (p2.*f - p1.*f);
  };
  const int64_t T = p.lora ? extrapolate(&MemoryPlan::Probe::trainable) : P;  // trained values
  if (p.lora) p.trainable = T;
  p.param_bytes =
      p.lora ? extrapolate(&MemoryPlan::Probe::stored_bytes) : P * bytes_of(d.params);
  // The optimizer in backward frees each gradient at its update: none is persistent, and those
  // alive at the peak (the tied embedding's, the running block's) are in the probes' rest.
  p.grad_bytes = c.optimizer_in_backward ? 0 : T * grad_bytes_per_value(d, sp);
  p.master_bytes = d.master != d.params ? T * bytes_of(d.master) : 0;
  p.state_bytes = T * sp.states * bytes_of(sp.state);
  p.cast_copy_bytes = sp.casts_weights && !casts_per_use(d, sp, c.model.checkpointing)
                          ? (p.lora ? T : gemm_params) * bytes_of(sp.compute)
                          : 0;
  MemoryFormats block_f;
  add_block_cast(block_f, *parts.recipe);
  if (block_f.block_cast_bits > 0 && !p.lora) {  // codes + scales, and the bf16 layers it keeps
    p.cast_copy_bytes =
        lm ? cast_copy_bytes(shape_of(nn::gpt_config_of(parts.config.model)), block_f)
           : int64_t(std::ceil(double(gemm_params) * block_f.block_cast_bits / 8.0));
  }
  // What the probes measured beyond the persistent tensors (one process, no ZeRO).
  const int64_t persistent =
      p.param_bytes + p.grad_bytes + p.master_bytes + p.state_bytes + p.cast_copy_bytes;
  p.activation_bytes = std::max<int64_t>(0, measured - persistent);
  const bool zero3 = opt.zero_stage >= 3 && R > 1;
  p.param_bytes = shard(p.param_bytes, 3);
  if (zero3 && lm && !p.lora) {
    const nn::GptConfig g = nn::gpt_config_of(parts.config.model);
    Zero3Units u;
    u.block = p2.params - p1.params;
    u.block_gemm = 4 * g.width * g.width + 2 * g.width * g.mlp_width;
    u.head = u.head_gemm = gemm_params - g.layers * u.block_gemm;  // the head's matrix
    u.root = 2 * g.width;  // the final LayerNorm: the embeddings and head are units of their own
    u.tied = g.tied_head;
    const int64_t cast = p.cast_copy_bytes > 0 ? bytes_of(sp.compute) : 0;
    const int64_t per_use =
        sp.casts_weights && casts_per_use(d, sp, c.model.checkpointing) ? bytes_of(sp.compute) : 0;
    p.param_bytes += zero3_gathered_bytes(u, bytes_of(d.params), cast,
                                          grad_bytes_per_value(d, sp), per_use);
  }
  p.grad_bytes = shard(p.grad_bytes, 2);
  p.master_bytes = shard(p.master_bytes, 1);
  p.state_bytes = shard(p.state_bytes, 1);
  // ZeRO 3 frees a released parameter's autocast copy with it (src/train/trainer_zero3.cpp):
  // no rank keeps one between uses.
  if (zero3) p.cast_copy_bytes = 0;
  p.comm_bytes = comm_bytes(opt, std::min<int64_t>(kDdpBucketBytes, P * bytes_of(sp.grad)));

  const double tokens = double(c.batch) * double(c.grad_accum) * (lm ? double(p.context) : 1.0);
  p.step_flops = 6.0 * double(P) * tokens;
  if (lm) {
    // Attention's two batched GEMMs (QK^T and PV), forward and backward, causal or not: 12 L T C.
    p.step_flops += 12.0 * double(shape.layers) * double(p.context) * double(shape.width) * tokens;
    // The analytic model of the same configuration, next to the probes' (study/model_shape.h).
    const ModelShape ms = shape_of(nn::gpt_config_of(parts.config.model));
    MemoryFormats mf = formats_of(d, sp, c.model.checkpointing);
    add_block_cast(mf, *parts.recipe);
    mf.optimizer_in_backward = c.optimizer_in_backward;
    const AnalyticMemory am = analytic_memory(ms, c.batch, p.context, mf, c.model.checkpointing);
    p.analytic_activation_bytes = am.activation_bytes;
    p.analytic_peak_bytes = am.peak_bytes;
    p.gemm_flops = double(c.grad_accum) *
                   step_gemm_flops(ms, c.batch * p.context, p.context, c.model.checkpointing);
    if (zero3 && !p.lora) zero3_backward_moment(p);
  } else {
    const StepTrace trace = trace_step_gemms(parts.config.model, c.batch);
    for (const auto& g : trace.gemms) {
      const double times = 1.0 + (g.a_grad ? 1 : 0) + (g.b_grad ? 1 : 0) + g.recompute;
      p.gemm_flops += 2.0 * double(g.m * g.n * g.k * g.count) * times;
    }
    p.gemm_flops *= double(c.grad_accum);
  }
  p.peak_bytes = p.param_bytes + p.grad_bytes + p.master_bytes + p.state_bytes + p.cast_copy_bytes +
                 p.comm_bytes + p.activation_bytes;
  add_estimate(p, sp.compute, opt, c.threads);
  return p;
}

MemoryPlan plan_shape(const ModelShape& shape, const ShapeRun& run, const PlanOptions& opt) {
  check_options(opt);
  try {
    validate(shape);
  } catch (const std::invalid_argument& e) {
    throw train::ConfigError(e.what());
  }
  if (run.batch < 1 || run.seq < 1 || run.micro_batches < 1) {
    throw train::ConfigError(
        fmt::format("batch ({}), sequence length ({}) and micro-batches ({}) must be positive",
                    run.batch, run.seq, run.micro_batches));
  }
  if (shape.family == ShapeFamily::gpt2 && run.seq > shape.context) {
    throw train::ConfigError(fmt::format("sequence length {} exceeds the context of {} ({})",
                                         run.seq, shape.name, shape.context));
  }
  const auto recipe = train::make_recipe(run.precision);
  const train::RecipeDtypes d = recipe->dtypes();
  const StepPrecision sp = step_precision(d, run.optimizer);
  MemoryFormats mf = formats_of(d, sp, run.checkpointing);
  add_block_cast(mf, *recipe);
  mf.optimizer_in_backward = run.optimizer_in_backward;
  const bool four_bit = train::is_recipe_family(run.precision, train::RecipeFamily::qlora);
  if (four_bit && run.lora.empty())
    throw train::ConfigError(
        fmt::format("--precision {} trains LoRA adapters on a frozen 4-bit base: give --lora "
                    "r=16,alpha=32,targets=...",
                    run.precision));
  AnalyticMemory am;
  int64_t trainable = 0;
  if (!run.lora.empty()) {
    try {
      const LoraMemory lm = analytic_lora_memory(shape, run.batch, run.seq, mf, run.checkpointing,
                                                 nn::LoraOptions::parse(run.lora), four_bit);
      am = lm.memory;
      trainable = lm.adapter_values;
    } catch (const std::invalid_argument& e) {
      throw train::ConfigError(e.what());
    }
  } else {
    am = analytic_memory(shape, run.batch, run.seq, mf, run.checkpointing);
  }
  MemoryPlan p;
  p.lora = !run.lora.empty();
  p.trainable = trainable;
  p.analytic = true;
  p.model = shape.name;
  p.precision = run.precision;
  p.parameters = parameters(shape);
  p.layers = shape.layers;
  p.batch = run.batch;
  p.context = run.seq;
  p.checkpointing = run.checkpointing;
  p.optimizer_in_backward = run.optimizer_in_backward;
  p.zero_stage = opt.zero_stage;
  p.ranks = opt.ranks;
  const int64_t R = opt.ranks;
  // The largest parameter: the head's matrix (GPT-2's tied wte) or a block's FFN matrix; the
  // head's is a 1-block model's GEMM weights less a block's (2 x one - two).
  ModelShape one_block = shape, two_blocks = shape;
  one_block.layers = 1;
  two_blocks.layers = 2;
  const int64_t head_matrix =
      2 * gemm_weight_values(one_block) - gemm_weight_values(two_blocks);
  const int64_t largest = run.lora.empty() ? std::max(head_matrix, shape.width * shape.ffn) : 0;
  const double share = zero_share(largest, p.parameters, R, opt.zero_stage);
  auto shard = [&](int64_t bytes, int from_stage) {
    return opt.zero_stage >= from_stage ? int64_t(std::ceil(double(bytes) * share)) : bytes;
  };
  const bool zero3 = opt.zero_stage >= 3 && R > 1;
  p.param_bytes = shard(am.param_bytes, 3);
  if (zero3 && run.lora.empty()) {
    ModelShape one = shape, two = shape;
    one.layers = 1;
    two.layers = 2;
    Zero3Units u;
    u.block = parameters(two) - parameters(one);
    u.block_gemm = gemm_weight_values(two) - gemm_weight_values(one);
    u.head = u.head_gemm = gemm_weight_values(one) - u.block_gemm;  // the head's matrix
    // The root keeps the final norm: the embeddings (and an untied head) are units of their own.
    const bool untied = shape.family == ShapeFamily::llama && !shape.tied_head;
    const int64_t positions = shape.family == ShapeFamily::gpt2 ? shape.context * shape.width : 0;
    u.root = p.parameters - shape.layers * u.block - (untied ? 2 : 1) * u.head - positions;
    u.tied = !untied;
    const int64_t cast = mf.casts_per_use || mf.block_cast_bits > 0 ? 0 : mf.cast_bytes;
    const int64_t per_use = mf.casts_per_use && mf.block_cast_bits == 0 ? mf.cast_bytes : 0;
    p.param_bytes += zero3_gathered_bytes(u, am.param_bytes / p.parameters, cast,
                                          am.grad_bytes / p.parameters, per_use);
  }
  p.grad_bytes = shard(am.grad_bytes, 2);
  p.master_bytes = shard(am.master_bytes, 1);
  p.state_bytes = shard(am.state_bytes, 1);
  // ZeRO 3 gathers each unit's weights when it runs: no cast copy is kept between uses (as in
  // plan_memory).
  p.cast_copy_bytes = zero3 ? 0 : am.cast_bytes;
  p.comm_bytes = comm_bytes(opt, std::min<int64_t>(kDdpBucketBytes, am.grad_bytes));
  // The analytic peak is one of two moments (model_shape.h); the row shows what it adds to the
  // persistent tensors at that moment, so that the rows add up to the peak.
  const int64_t unsharded =
      am.param_bytes + am.grad_bytes + am.master_bytes + am.state_bytes + am.cast_bytes;
  p.activation_bytes = std::max<int64_t>(0, am.peak_bytes - unsharded);
  p.analytic_activation_bytes = am.activation_bytes;
  if (zero3 && run.lora.empty()) zero3_backward_moment(p);
  p.peak_bytes = p.param_bytes + p.grad_bytes + p.master_bytes + p.state_bytes + p.cast_copy_bytes +
                 p.comm_bytes + p.activation_bytes;
  p.analytic_peak_bytes = p.peak_bytes;
  const double tokens = double(run.batch * run.seq * run.micro_batches);
  p.step_flops = 6.0 * double(p.parameters) * tokens +
                 12.0 * double(shape.layers) * double(run.seq) * double(shape.width) * tokens;
  p.gemm_flops = double(run.micro_batches) *
                 step_gemm_flops(shape, run.batch * run.seq, run.seq, run.checkpointing);
  add_estimate(p, sp.compute, opt, run.threads);
  return p;
}

MemoryNeed plan_training_memory(const train::TrainConfig& c) {
  MemoryNeed need;
  if (train::is_language_model(c.model.name)) {
    const nn::GptConfig g = nn::gpt_config_of(c.model);
    ShapeRun run;
    run.batch = c.batch;
    run.seq = g.context;
    run.micro_batches = c.grad_accum;
    run.precision = c.precision;
    run.optimizer = c.optimizer;
    run.checkpointing = c.model.checkpointing;
    run.optimizer_in_backward = c.optimizer_in_backward;
    run.lora = c.lora;
    PlanOptions opt;
    opt.estimate_time = false;
    MemoryPlan p;
    try {
      // LoRA / QLoRA: gradients and states for the adapters only, the base as stored.
      p = plan_shape(shape_of(g), run, opt);
    } catch (const train::ConfigError&) {
      if (run.lora.empty()) throw;
      // Targets the analytic shape does not name: price the run as full fine-tuning (an upper
      // bound), in the bf16 recipe's formats for qlora-*.
      run.lora.clear();
      if (train::is_recipe_family(run.precision, train::RecipeFamily::qlora))
        run.precision = "bf16";
      p = plan_shape(shape_of(g), run, opt);
    }
    need.peak_bytes = p.peak_bytes;
    need.activation_bytes = p.activation_bytes;
    need.persistent_bytes = p.peak_bytes - p.activation_bytes;
    return need;
  }
  // mlp, cnn: traced on one sample, scaled by the batch in double (a huge batch must not
  // overflow the count it is refused by).
  const MemoryFormats f = memory_formats(c.precision, c.optimizer, c.model.checkpointing);
  const StepTrace t = trace_step_gemms(c.model, 1);
  double per_sample = 0;
  for (const StepGemm& g : t.gemms) per_sample += double(g.m) * double(g.n) * double(g.count);
  if (!t.gemms.empty()) per_sample += double(t.gemms.front().m) * double(t.gemms.front().k);
  const double activations = per_sample * double(c.batch) * f.save_bytes;
  const double persistent =
      double(t.parameters) * (f.param_bytes + f.master_bytes + f.grad_bytes + f.state_bytes) +
      double(t.weight_values) * f.cast_bytes;
  constexpr double kMax = 9.0e18;  // below INT64_MAX
  need.activation_bytes = int64_t(std::min(activations, kMax));
  need.persistent_bytes = int64_t(std::min(persistent, kMax));
  need.peak_bytes = int64_t(std::min(activations + persistent, kMax));
  return need;
}

}  // namespace mixp::study
