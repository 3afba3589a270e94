#include "mixp/train/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "mixp/amp/grad_scaler.h"
#include "mixp/autograd/grad_ready_hook.h"
#include "mixp/backend/backend.h"
#include "mixp/nn/gpt.h"
#include "mixp/nn/lora_io.h"
#include "mixp/ops/ops.h"
#include "mixp/optim/clip_grad.h"
#include "mixp/optim/step_reductions.h"
#include "mixp/quant/qlora.h"
#include "mixp/tensor/allocator.h"
#include "mixp/train/build_run.h"
#include "trainer_impl.h"

namespace mixp::train {

namespace {
int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

Tensor cross_entropy_loss(const Tensor& output, const Tensor& target) {
  // [B, T, V] -> [B * T, V] (a language model); the built-in models' targets are flat already.
  const Tensor logits = output.dim() > 2 ? output.reshape({-1, output.size(-1)}) : output;
  return cross_entropy(logits, target.dim() > 1 ? target.reshape({-1}) : target);
}

void Trainer::Impl::init(RunParts parts, const OptimizerFactory& make_optimizer) {
  cfg = std::move(parts.config);
  recipe = std::move(parts.recipe);
  source = std::move(parts.data);
  model = std::move(parts.model);
  lm = source->vocab_size() > 0;
  // A second process saving into the same folder fails here, before any training (the folder's
  // parent was checked already); the lock is held until the Trainer is destroyed.
  dist::ProcessGroup& world = dist::world();
  if (world.size() > 1) {
    world.set_timeout(cfg.comm_timeout);
    dp = std::make_unique<DataParallel>(
        world, DataParallelOptions{.grad_comm = dist::parse_grad_comm(cfg.grad_comm),
                                   .bucket_mb = cfg.bucket_mb,
                                   .overlap = cfg.comm_overlap,
                                   // The built-in models share no parameter across their
                                   // checkpointed segments (each block's are its own; a tied
                                   // head and its embedding are outside them), so even under
                                   // --checkpointing each is finished once and the first step
                                   // overlaps too. Under ZeRO 2 and 3 a first step that only
                                   // watched would hold every whole gradient to its end (at
                                   // GPT-2 124M over 4 ranks, 471 MiB: the run's peak).
                                   .reentrant_backward = custom_model});
    // Outputs and threads may differ (only rank 0 writes; threads change no result).
    TrainConfig shared = without_outputs(cfg);
    shared.threads = 0;
    dp->check_same_config(config_to_json(shared));
    // Every rank starts from rank 0's weights (DDP does the same at construction).
    dp->broadcast_parameters(*model);
    // FP8 delayed scaling: the amaxes of a pass are maxed over the ranks before the scales are
    // updated, so every rank quantizes with the same scales (fp8_linear.h); under ZeRO the loss
    // scaler's skip decision is global too.
    dp->install_step_reducers(/*sharded=*/cfg.zero > 0);
  }
  // Only rank 0 writes checkpoints: the replicas are identical.
  if (!cfg.save_dir.empty() && is_rank0()) save_lock = std::make_unique<FolderLock>(cfg.save_dir);
  nn::NamedTensors named = model->named_parameters();
  // A frozen parameter (LoRA's base, nn/lora.h) gets neither a gradient nor optimizer state: the
  // step (clipping, data parallelism, the optimizer) sees the trainable parameters only.
  std::erase_if(named, [](const auto& e) { return !e.second.requires_grad(); });
  for (const auto& [name, p] : named) {
    params.push_back(p);
    param_names.push_back(name);
  }
  nn::NamedTensors mine = named;
  // The owned parameters' places in the whole list: their stochastic write-back streams.
  std::vector<uint64_t> streams;
  std::vector<uint64_t> offsets;
  if (dp && cfg.zero == 3) {
    // ZeRO stage 3 (trainer_zero3.h): every parameter split by rows over the ranks; this rank's
    // optimizer steps its rows of each (the pieces), and their rows of the reduced gradients
    // reach them. The parameters stay whole until the first step (a checkpoint is loaded into
    // them first).
    zero3 = std::make_unique<Zero3>(*dp, *model, named, dist::parse_grad_comm(cfg.grad_comm),
                                    cfg.zero3_prefetch);
    dp->shard_gradient_rows(zero3->pieces());
    mine.clear();
    for (size_t i = 0; i < named.size(); ++i) {
      const Tensor& piece = zero3->pieces()[i];
      if (!piece.defined()) continue;
      mine.emplace_back(named[i].first, piece);
      owned.push_back(piece);
      streams.push_back(i);
    }
    offsets = zero3->piece_offsets();
  } else if (dp && cfg.zero > 0) {
    // ZeRO stage 1 (data_parallel.h): this rank's optimizer holds only the parameters it owns;
    // stage 2: and only their reduced gradients reach it.
    owner = dp->partition(params);
    if (cfg.zero >= 2) dp->shard_gradients(owner);
    mine.clear();
    for (size_t i = 0; i < named.size(); ++i) {
      if (owner[i] == dp->rank()) {
        mine.push_back(named[i]);
        owned.push_back(params[i]);
        streams.push_back(i);
      }
    }
  }
  opt = make_optimizer ? make_optimizer(mine, recipe->optimizer_precision())
                       : detail::build_optimizer(cfg, mine, recipe->optimizer_precision());
  if (!opt) throw ConfigError("TrainOptions::make_optimizer returned no optimizer");
  if (dp && cfg.zero > 0 && opt->params().size() == owned.size()) {
    // The shard's parameters draw the stochastic write-back streams of their places in the whole
    // list, so bf16-pure rounds as under --zero 0 (the unsharded optimizer's index i).
    // A ZeRO 3 piece draws from its place in the whole parameter too (offsets).
    opt->set_write_back_streams(std::move(streams), std::move(offsets));
  }
  steps_per_epoch = ceil_div(source->batches_per_epoch(), cfg.grad_accum);
  total = cfg.steps > 0 ? cfg.steps : cfg.epochs * steps_per_epoch;
  if (cfg.optimizer_in_backward) {
    check_optimizer_in_backward();
    for (size_t i = 0; i < params.size(); ++i) param_index.emplace(params[i].impl(), i);
  }
}

void Trainer::Impl::check_optimizer_in_backward() const {
  // clip and grad_accum are refused with the rest of the loop's configuration (train_config.cpp).
  const std::string no = "--optimizer-in-backward updates each parameter as soon as backward has "
                         "finished its gradient, so it ";
  if (dp) {
    throw ConfigError(fmt::format(
        "{}cannot wait for the gradients' all-reduce over the {} data-parallel ranks; run one "
        "process, or drop --optimizer-in-backward",
        no, dp->size()));
  }
  // Every recipe of the registry without loss scaling steps with Optimizer::step (recipe.h
  // PrecisionRecipe::step); a Trainer built from parts, whose recipe may step otherwise, has no
  // such option.
  const auto* policy = dynamic_cast<const PolicyRecipe*>(recipe.get());
  if (recipe->skips_nonfinite() || recipe->loss_scale() != 1.0 || (policy && policy->scaler())) {
    throw ConfigError(fmt::format(
        "{}cannot run precision {}: its loss scaler unscales every gradient and skips the step "
        "when any is inf/NaN, which is known only after the whole backward; use a recipe "
        "without loss scaling (fp32, bf16, bf16-pure, tf32, fp64, fp8 ...) or drop "
        "--optimizer-in-backward",
        no, recipe->name()));
  }
  if (opt->params().size() != params.size()) {
    throw ConfigError(no + "needs an optimizer over every parameter of the model");
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (!opt->params()[i].param.is_same(params[i]))
      throw ConfigError(no + "needs an optimizer over the model's parameters, in their order");
  }
}


Trainer::Trainer(const TrainConfig& config) : impl_(std::make_unique<Impl>()) {
  impl_->constructed_ms = now_ms();
  impl_->cfg = config.resolved();
  if (!impl_->cfg.resume_dir.empty()) impl_->check_resume_config(impl_->cfg.resume_dir);
  impl_->init(build_run(impl_->cfg, RunPurpose::train), nullptr);
  if (!impl_->cfg.resume_dir.empty()) impl_->resume(impl_->cfg.resume_dir);
}

Trainer::Trainer(std::shared_ptr<nn::Module> model, std::unique_ptr<PrecisionRecipe> recipe,
                 std::unique_ptr<DataSource> data, const TrainOptions& o)
    : impl_(std::make_unique<Impl>()) {
  impl_->constructed_ms = now_ms();
  if (!model || !recipe || !data) {
    throw ConfigError("a Trainer built from parts needs a model, a recipe and a data source");
  }
  RunParts p;
  TrainConfig& c = p.config;
  c.model.name = o.model_name;
  c.data = data->description();
  c.epochs = o.epochs;
  c.steps = o.steps;
  c.batch = data->batch_size();
  c.grad_accum = o.grad_accum;
  c.lr = o.lr;
  c.optimizer = o.optimizer;
  c.weight_decay = o.weight_decay;
  c.momentum = o.momentum;
  c.clip = o.clip;
  c.schedule = o.schedule;
  c.warmup_steps = o.warmup_steps;
  c.seed = o.seed;
  c.threads = o.threads;
  c.evaluate = o.evaluate && data->eval_batches() > 0;
  c.save_dir = o.save_dir;
  c.save_every = o.save_every;
  c.resume_dir = o.resume_dir;
  detail::check_loop_config(c);
  if (!(c.lr > 0))
    throw ConfigError(fmt::format("the learning rate must be positive, got {}", c.lr));
  if (c.epochs == 0 && c.steps == 0) c.epochs = 1;
  if (!c.save_dir.empty()) detail::check_save_dir(c.save_dir);
  if (o.make_optimizer) c.optimizer = "custom";
  if (c.threads > 0) set_num_threads(c.threads);
  c.precision = recipe->name();
  recipe->prepare_model(*model);
  p.recipe = std::move(recipe);
  p.data = std::move(data);
  p.model = std::move(model);
  impl_->custom_model = true;
  impl_->init(std::move(p), o.make_optimizer);
  if (o.loss) {
    impl_->loss = o.loss;
    impl_->default_loss = false;
  }
  if (!impl_->cfg.resume_dir.empty()) impl_->resume(impl_->cfg.resume_dir);
}

Trainer::~Trainer() = default;

void Trainer::add_callback(std::shared_ptr<TrainCallback> cb) {
  if (cb && impl_->cfg.optimizer_in_backward && cb->reads_gradients()) {
    throw ConfigError(
        "this callback reads the gradients after backward (e.g. --inspect's gradient statistics), "
        "but --optimizer-in-backward frees each gradient inside backward, right after its "
        "parameter's update; drop one of them");
  }
  impl_->callbacks.push_back(std::move(cb));
}

std::vector<double> Trainer::train_steps(int64_t n) {
  std::vector<double> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(impl_->run_step().loss);
  return out;
}

TrainResult Trainer::fit() {
  Impl& s = *impl_;
  if (s.step > s.total) {
    throw ConfigError(fmt::format(
        "the checkpoint is already at step {}, beyond this run's {} steps; ask for more steps or "
        "epochs (they count the whole run, resumed steps included)",
        s.step, s.total));
  }
  s.skipped_at_start = s.skipped;
  // The peak of the memory the run's tensors live in: the training device's caching allocator
  // (the default device, which the model and data were made on: a GPU's under --device cuda).
  const Device mem_device = default_device();
  // ZeRO 3: the parameters whole since the start (or a resume's load) are this rank's pieces
  // from here on; released before the peak is reset, so that it counts the steps' memory only.
  if (s.zero3) s.zero3->release_all();
  reset_peak_memory(mem_device);
  EnergyMeter meter;
  meter.start();
  for (auto& cb : s.callbacks) cb->on_train_begin(s.step + 1, s.total);
  const double t0 = now_ms();
  while (s.step < s.total) {
    StepInfo info = s.run_step();
    info.elapsed_s = (now_ms() - t0) * 1e-3;
    s.times.add(info.ms);
    s.cpu_times.add(info.cpu_ms);
    s.losses.push_back(info.loss);
    meter.sample();
    for (auto& cb : s.callbacks) cb->on_step_end(info);
    if (s.cfg.save_every > 0 && s.step % s.cfg.save_every == 0 && s.step < s.total) {
      s.save(s.cfg.save_dir);
    }
  }
  TrainResult r;
  r.train_time_s = (now_ms() - t0) * 1e-3;
  const AllocatorStats mem = allocator_stats(mem_device);
  r.memory_device = mem_device.str();
  r.peak_memory_bytes = mem.peak_allocated_bytes;
  r.peak_requested_bytes = mem.peak_requested_bytes;
  r.peak_reserved_bytes = mem.peak_reserved_bytes;
  r.energy_joules = meter.joules();
  // ZeRO 3: whole parameters for the evaluation, the checkpoint and the adapters (collective);
  // after the peak was read, which is the training steps'.
  if (s.zero3) s.zero3->gather_all();
  r.energy_source = meter.source();

  r.model = s.cfg.model.name;
  r.precision = s.recipe->name();
  r.optimizer = s.cfg.optimizer;
  r.data = s.source->description();
  r.steps = s.step;
  r.steps_this_run = int64_t(s.losses.size());
  r.skipped_steps = s.skipped;
  r.skipped_steps_this_run = s.skipped - s.skipped_at_start;
  r.loss_scale = s.recipe->loss_scale();
  r.recipe = s.recipe->describe();
  r.layer_precision = s.cfg.layer_precision;
  r.epochs = double(s.step) / double(s.steps_per_epoch);
  r.ms_per_step = s.times.median_ms();
  r.cpu_ms_per_step = s.cpu_times.median_ms();
  const double samples_per_step = double(s.cfg.batch * s.cfg.grad_accum);
  r.samples_per_s = r.ms_per_step > 0 ? samples_per_step * 1000.0 / r.ms_per_step : 0;
  if (s.lm) r.tokens_per_s = r.samples_per_s * double(s.cfg.model.context);
  r.final_loss = s.last_loss;
  r.threads = get_num_threads();
  r.batch = s.cfg.batch;
  r.grad_accum = s.cfg.grad_accum;
  // All of them, frozen ones (LoRA's base) included; a 4-bit base (QLoRA) counts its values.
  r.parameters = quant::parameter_values(*s.model);
  if (!s.cfg.lora.empty() || !s.cfg.lora_from.empty()) {
    // A LoRA run's trained values (the adapters; PEFT's print_trainable_parameters), next to the
    // total above: `trainable_parameters` in --json and in the study's report (docs/lora.md).
    int64_t trainable = 0;
    for (const Tensor& p : s.params) trainable += p.numel();
    r.extra_metrics.emplace_back("trainable_parameters", double(trainable));
  }
  r.seed = s.cfg.seed;
  r.losses = s.losses;
  if (s.dp) {
    r.ranks = s.dp->size();
    r.ranks_per_host = s.dp->ranks_per_host();
    r.hosts = int(r.ranks_per_host.size());
    r.shared_memory = s.dp->shared_memory_reduction();
    if (!r.shared_memory) r.shared_memory_note = s.dp->shared_memory_off_reason(r.hosts);
    r.gradient_transport = s.dp->gradient_transport();
    r.grad_comm = s.cfg.grad_comm;
    r.zero = s.cfg.zero;
    r.comm_buckets = s.dp->buckets();
    r.comm_buckets_overlapped = s.dp->buckets_started_in_backward();
    for (const auto& [name, t] : s.opt->state_dict().tensors) {
      r.optimizer_state_bytes += int64_t(t.nbytes());
    }
    r.samples_per_s *= r.ranks;
    r.tokens_per_s *= r.ranks;
    if (!s.comm_ms.empty()) {
      std::vector<double> c = s.comm_ms;
      std::nth_element(c.begin(), c.begin() + c.size() / 2, c.end());
      r.comm_ms_per_step = c[c.size() / 2];
      r.comm_bytes_per_step = double(s.comm_bytes_total) / double(s.comm_ms.size());
      r.comm_param_bytes_per_step = double(s.comm_param_bytes_total) / double(s.comm_ms.size());
    }
    if (!s.gather_ms.empty()) {
      auto median = [&](size_t k) {
        std::vector<double> c;
        for (const auto& g : s.gather_ms) c.push_back(g[k]);
        std::nth_element(c.begin(), c.begin() + c.size() / 2, c.end());
        return c[c.size() / 2];
      };
      r.param_gather_ms_per_step = median(0);
      r.param_gather_wait_ms_per_step = median(1);
      r.param_pack_ms_per_step = median(2);
      r.param_unpack_ms_per_step = median(3);
      r.zero3_prefetch = s.zero3->prefetching();
      r.param_gathers_last_step = int64_t(s.gathers_last);
      r.param_gathers_prefetched_last_step = int64_t(s.prefetched_last);
      r.param_gathers_copy_only_last_step = int64_t(s.copy_only_last);
      r.head_grads_deferred_last_step = int64_t(s.deferred_last);
      r.param_gathered_peak_bytes_last_step = int64_t(s.gathered_peak_last);
    }
  }

  s.metrics["train_time_s"] = s.prior_train_time_s + r.train_time_s;
  s.metrics["final_loss"] = r.final_loss;
  s.metrics["skipped_steps"] = s.skipped;
  if (s.cfg.evaluate) {
    for (auto& cb : s.callbacks) cb->on_evaluate_begin();
    EvalResult ev;
    if (auto inf = s.recipe->inference_model(*s.model)) {
      // The recipe reports another model (int8-qat: the converted int8 model); the trained one
      // is evaluated too, beside it.
      const double e0 = now_ms();
      ev = detail::evaluate_model(*inf, *s.source, *s.recipe, s.lm, s.loss, s.group());
      const double e1 = now_ms();
      const EvalResult trained = evaluate();
      const std::string label = s.recipe->trained_model_label();
      r.extra_metrics.emplace_back(label + "_accuracy", trained.accuracy.value_or(NAN));
      r.extra_metrics.emplace_back(label + "_loss", trained.loss);
      for (const auto& [k, v] : r.extra_metrics) s.metrics[k] = v;
      r.extra_metrics.emplace_back("eval_time_s", (e1 - e0) * 1e-3);
      r.extra_metrics.emplace_back(label + "_eval_time_s", (now_ms() - e1) * 1e-3);
    } else {
      ev = evaluate();
    }
    if (s.lm) {
      r.val_loss = ev.loss;
      s.metrics["val_loss"] = ev.loss;
    } else {
      r.test_accuracy = ev.accuracy;
      r.test_loss = ev.loss;
      s.metrics["test_accuracy"] = ev.accuracy.value_or(0.0);
      s.metrics["test_loss"] = ev.loss;
    }
  }
  // The Trainer reports whether the run trained; its caller decides (mixp train exits 1).
  r.not_trained = detail::not_trained_reason(r, s.cfg.lr, s.recipe->skips_nonfinite());
  r.trained = r.not_trained.empty();
  for (auto& cb : s.callbacks) cb->on_train_end();
  if (!s.cfg.save_dir.empty()) {
    s.save(s.cfg.save_dir);
    r.saved_to = s.cfg.save_dir;
  }
  if (!s.cfg.lora_out.empty() && s.is_rank0()) {
    nn::save_lora_adapter(*s.model, nn::LoraOptions::parse(s.cfg.lora), s.cfg.lora_out,
                          s.cfg.init_from);
  }
  r.peak_rss_bytes = peak_rss_bytes();
  r.total_time_s = (now_ms() - s.constructed_ms) * 1e-3;
  return r;
}

EvalResult Trainer::evaluate() {
  if (impl_->zero3) impl_->zero3->gather_all();  // ZeRO 3: evaluated with whole parameters
  return detail::evaluate_model(*impl_->model, *impl_->source, *impl_->recipe, impl_->lm,
                                impl_->loss, impl_->group());
}

void Trainer::save(const std::filesystem::path& dir) const {
  impl_->save(dir);
}
const TrainConfig& Trainer::config() const {
  return impl_->cfg;
}
int64_t Trainer::step() const {
  return impl_->step;
}
int64_t Trainer::total_steps() const {
  return impl_->total;
}
int64_t Trainer::steps_per_epoch() const {
  return impl_->steps_per_epoch;
}
nn::Module& Trainer::model() {
  return *impl_->model;
}
optim::Optimizer& Trainer::optimizer() {
  return *impl_->opt;
}
const PrecisionRecipe& Trainer::recipe() const {
  return *impl_->recipe;
}
DataSource& Trainer::data() {
  return *impl_->source;
}
std::string Trainer::data_description() const {
  return impl_->source->description();
}

}  // namespace mixp::train
