// Trainer::Impl::run_step (trainer_impl.h): one optimizer step, as named phases in the order
// they run. Each phase says what it reads from and leaves in the StepState.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "mixp/amp/grad_scaler.h"
#include "mixp/autograd/grad_ready_hook.h"
#include "mixp/nn/gpt.h"
#include "mixp/ops/ops.h"
#include "mixp/optim/clip_grad.h"
#include "mixp/optim/step_reductions.h"
#include "trainer_impl.h"

namespace mixp::train {

void Trainer::Impl::step_in_backward(const Tensor& leaf) {
  const auto it = param_index.find(leaf.impl());
  if (it == param_index.end()) return;  // not a parameter (e.g. a checkpointed segment's input)
  const size_t k = it->second;
  if (reported[k]++ > 0) {
    // Its first report was not final (a parameter shared by two checkpointed segments, or used
    // both inside and outside one): it was updated with a part of its gradient.
    throw TrainError(fmt::format(
        "step {}: --optimizer-in-backward: backward reported the gradient of parameter '{}' "
        "twice, so it was updated before its gradient was complete (is it shared across "
        "checkpointed segments?); train this model without --optimizer-in-backward",
        step + 1, opt->params()[k].name));
  }
  // The norm's partial from the gradient the update reads, as optim::grad_norm takes it.
  const double sq = optim::grad_sum_squares(leaf);
  grad_sq[k] = sq;
  // The NaN guard (run_step): a non-finite gradient stops the run; no parameter after it is
  // updated with it.
  if (!std::isfinite(sq)) nonfinite_grad = true;
  if (!nonfinite_grad) opt->step_parameter(k);
  params[k].set_grad(Tensor());
}

void Trainer::Impl::nonfinite_error(const std::string& what, double value, int64_t micro,
                                    int64_t window) const {
  std::string where = fmt::format("step {} (epoch {}", step + 1, source->epoch());
  if (window > 1 && micro >= 0) where += fmt::format(", micro-batch {} of {}", micro + 1, window);
  where += ")";
  const std::string v = std::isnan(value) ? "NaN" : (value > 0 ? "inf" : "-inf");
  throw TrainError(fmt::format(
      "{}: the {} is {} in precision {}; training stopped{}. Lower the learning rate (now {:g}), "
      "clip gradients (--clip 1.0), or check the data for extreme values",
      where, what, v, cfg.precision, cfg.save_dir.empty() ? "" : " and no checkpoint was written",
      detail::schedule_lr(cfg, step, total)));
}

StepContext Trainer::Impl::step_context(const StepState& st, int64_t micro, double loss) {
  return StepContext{.step = step + 1,
                     .total_steps = total,
                     .epoch = st.epoch,
                     .micro_batch = micro,
                     .micro_batches = st.window,
                     .loss = loss,
                     .loss_scale = recipe->loss_scale(),
                     .model = *model,
                     .parameters = params,
                     .recipe = *recipe,
                     .optimizer = *opt};
}

// Phase 1: clear the gradients, broadcast the buffers, pick the accumulation window.
Trainer::Impl::StepState Trainer::Impl::begin_step() {
  StepState st;
  st.t0 = now_ms();
  st.c0 = process_cpu_ms();
  st.comm0 = dp ? dp->comm_ms() : 0;
  opt->zero_grad();
  // ZeRO: the optimizer clears its own parameters' gradients; the others are cleared here.
  for (size_t i = 0; i < owner.size(); ++i) {
    if (owner[i] != dp->rank()) params[i].set_grad(Tensor());
  }
  if (zero3) {
    // ZeRO 3: the whole gradients were dropped once their rows were on the wire; the pieces'
    // were cleared by the optimizer.
    for (Tensor& p : params) p.set_grad(Tensor());
  }
  if (zero3) {
    // ZeRO 3: every parameter this rank does not own freed (whole after a checkpoint, an
    // evaluation or at the start); the units gather them as the forward reaches them.
    zero3->release_all();
    st.param_bytes0 = zero3->bytes_sent();
    st.gather0 = {zero3->gather_ms(), zero3->wait_ms(), zero3->pack_ms(), zero3->unpack_ms()};
    st.gathers0 = zero3->gathers();
    st.prefetched0 = zero3->prefetched();
    st.copy_only0 = zero3->copy_only_gathers();
    st.deferred0 = zero3->deferred_grads();
    zero3->reset_gathered_peak();
  }
  // DDP's broadcast_buffers: rank 0's BatchNorm statistics, observers and FP8 scaling state.
  if (dp) dp->broadcast_buffers(*model);
  // An accumulation window never spans two epochs: the last window of an epoch may be shorter,
  // and its losses are divided by its own length so that the step still sees a mean.
  st.window = std::min(cfg.grad_accum, source->batches_per_epoch() - source->position());
  st.epoch = source->epoch();
  recipe->before_step(*model, st.epoch);
  return st;
}

// The loss of one micro-batch, through the recipe's forward scope and wrappers.
Tensor Trainer::Impl::forward_loss(const Batch& b) {
  auto scope = recipe->forward_scope();
  // The default loss of a language model: computed by a GPT itself (nn/gpt.h, the fused
  // classifier), whatever recipe wrapped its layers.
  nn::Gpt* gpt = lm && default_loss ? dynamic_cast<nn::Gpt*>(model.get()) : nullptr;
  if (!gpt) return loss((*model)(b.input), b.target);  // through the recipe's forward wrappers
  // The GPT's forward returns the loss (nn/gpt.h): the same numbers as cross_entropy_loss,
  // without the copies of the [tokens, vocabulary] logits at the step's memory peak.
  gpt->set_loss_targets(b.target);
  struct Clear {
    nn::Gpt* g;
    ~Clear() { g->set_loss_targets(Tensor()); }
  } clear{gpt};
  return (*model)(b.input);  // through the recipe's forward wrappers
}

// Phase 2: forward and backward of every micro-batch; before the last backward the
// gradient-sync stage begins (the global loss and samples, and each rank's weight).
void Trainer::Impl::forward_backward(StepState& st) {
  double loss_sum = 0;
  for (int64_t m = 0; m < st.window; ++m) {
    Batch b = source->next();
    const Tensor batch_loss = forward_loss(b);
    const double l = batch_loss.item();
    if (!std::isfinite(l) && !recipe->skips_nonfinite()) nonfinite_error("loss", l, m, st.window);
    loss_sum += l;
    st.samples += b.samples;
    if (dp && m == st.window - 1) {
      // The gradient-sync stage begins before the last backward (data_parallel.h): the step's
      // loss and samples over all ranks give each rank's weight, and buckets are reduced as
      // backward finishes their gradients.
      std::vector<double> v{loss_sum / double(st.window) * double(st.samples),
                            double(st.samples)};
      dp->group().allreduce(v, dist::ReduceOp::sum);
      st.global_loss = v[0] / v[1];
      st.global_samples = int64_t(v[1]);
      dp->begin_gradients(params, double(st.samples) / v[1]);
      if (zero3) st.param_bytes_sync = zero3->group_bytes_sent();
    }
    // ZeRO 3: each unit freed again once backward has finished its gradients.
    const std::unique_ptr<GradReadyHookScope> release =
        zero3 ? zero3->backward_scope() : nullptr;
    if (cfg.optimizer_in_backward) {
      // The optimizer in backward (train_config.h): the schedule's rate before any update (the
      // ordinary step sets it after backward: the same value), then each parameter stepped by
      // the grad-ready hook as soon as its gradient is final, and its gradient freed.
      opt->set_lr(detail::schedule_lr(cfg, step - skipped, total));
      grad_sq.assign(params.size(), 0.0);
      reported.assign(params.size(), 0);
      nonfinite_grad = false;
      GradReadyHookScope hook([this](const Tensor& leaf) { step_in_backward(leaf); });
      recipe->scale_loss(batch_loss).backward();
    } else {
      recipe->scale_loss(st.window == 1 ? batch_loss : mul(batch_loss, 1.0 / double(st.window)))
          .backward();
    }
    if (!callbacks.empty()) {
      StepContext ctx = step_context(st, m, l);
      for (auto& cb : callbacks) cb->on_backward_end(ctx);
    }
  }
  st.loss = loss_sum / double(st.window);
}

// Phase 3: the gradient-sync stage ends (data_parallel.h): the gradients reduced to the global
// mean, each rank weighted by its share of the samples; then the on_gradients_ready callbacks.
void Trainer::Impl::reduce_gradients(StepState& st) {
  if (dp) {
    dp->finish_gradients();
    uint64_t grad_bytes = dp->last_gradient_bytes();
    if (zero3) {
      // ZeRO 3: the parameters gathered during the last backward through the group went out in
      // the same window (with prefetch they go through its duplicate, not counted there); and
      // every parameter back to its released state (the optimizer steps the pieces).
      grad_bytes -= zero3->group_bytes_sent() - st.param_bytes_sync;
      zero3->release_all();
    }
    comm_bytes_total += grad_bytes;
    st.loss = st.global_loss;
    st.samples = st.global_samples;
  }
  if (!callbacks.empty()) {
    // The stage between backward and the optimizer step (callbacks.h): one virtual call per
    // callback and step.
    StepContext ctx = step_context(st, st.window - 1, st.loss);
    for (auto& cb : callbacks) cb->on_gradients_ready(ctx);
  }
}

// Phase 4: unscale (fp16 recipes), then clip the real gradients. Non-finite gradients skip the
// step under loss scaling; otherwise they are an error (the NaN guard).
void Trainer::Impl::unscale_clip_check(StepState& st) {
  const bool finite = cfg.optimizer_in_backward || recipe->unscale_and_check(*opt);
  if (finite) {
    if (cfg.optimizer_in_backward) {
      // The gradients are gone; their squares were summed per parameter before each update, and
      // are added here in optim::grad_norm's order: the same number, bit for bit.
      double sq = 0.0;
      for (const double v : grad_sq) sq += v;
      optim::reduce_step_values(optim::StepValue::grad_sum_squares, std::span<double>(&sq, 1));
      st.norm = std::sqrt(sq);
    } else if (zero3) {
      // ZeRO 3: this rank unscaled (and steps) only its rows; the norm is the global one.
      st.norm = dp->row_sharded_grad_norm(zero3->pieces());
      if (cfg.clip > 0) optim::clip_grads_by_norm(owned, st.norm, cfg.clip);
    } else if (!owner.empty()) {
      // ZeRO: this rank unscaled (and steps) only its own gradients; the norm is the global one.
      st.norm = dp->sharded_grad_norm(params, owner);
      if (cfg.clip > 0) optim::clip_grads_by_norm(owned, st.norm, cfg.clip);
    } else {
      st.norm = cfg.clip > 0 ? optim::clip_grad_norm(params, cfg.clip) : optim::grad_norm(params);
    }
    if (!std::isfinite(st.norm) && !recipe->skips_nonfinite())
      nonfinite_error("gradient norm", st.norm, -1, st.window);
  } else if (!recipe->skips_nonfinite()) {
    nonfinite_error("gradient", std::nan(""), -1, st.window);
  }
}

// Phase 5: the learning rate of this step, then the optimizer step (or, with the optimizer in
// backward, its end: every parameter was updated in backward, step_in_backward).
void Trainer::Impl::optimizer_step(StepState& st) {
  // The schedule advances on steps taken, not on steps skipped by the loss scaler.
  st.lr = detail::schedule_lr(cfg, step - skipped, total);
  opt->set_lr(st.lr);
  st.scale_used = recipe->loss_scale();  // what this step's losses were multiplied by
  if (cfg.optimizer_in_backward) {
    opt->finish_step();
  } else {
    st.stepped = recipe->step(*opt);
  }
}

// Phase 6: ZeRO 1/2: every parameter from the rank that updated it. ZeRO 3: nothing is sent
// now; the next forward gathers the new values unit by unit.
void Trainer::Impl::sync_parameters() {
  if (zero3) {
    zero3->parameters_updated();
  } else if (!owner.empty()) {
    dp->broadcast_from_owners(params, owner);
  }
}

// Phase 7: the loss scale's update, the counters, the replicas' check, and what the step did.
StepInfo Trainer::Impl::end_step(const StepState& st) {
  const bool skip = !st.stepped;
  try {
    recipe->update(skip);
  } catch (const amp::LossScaleCollapsed& e) {
    throw TrainError(fmt::format("step {} (epoch {}): {}{}", step + 1, source->epoch(), e.what(),
                                 cfg.save_dir.empty() ? "" : "; no checkpoint was written"));
  }
  ++step;
  if (skip) ++skipped;
  last_loss = st.loss;
  if (zero3) comm_param_bytes_total += zero3->bytes_sent() - st.param_bytes0;
  if (dp && cfg.check_replicas > 0 && step % cfg.check_replicas == 0) {
    if (zero3) zero3->gather_all();  // whole parameters to compare (ZeRO 3)
    dp->check_replicas(model->named_parameters(), step);
  }
  // ZeRO 3 with prefetch: the gathers' transfers run on another thread; what this one waited for
  // them is its time in communication.
  if (dp) {
    comm_ms.push_back(dp->comm_ms() - st.comm0 +
                      (zero3 ? zero3->wait_ms() - st.gather0[1] : 0.0));
  }
  if (zero3) {
    gather_ms.push_back({zero3->gather_ms() - st.gather0[0], zero3->wait_ms() - st.gather0[1],
                         zero3->pack_ms() - st.gather0[2], zero3->unpack_ms() - st.gather0[3]});
    gathers_last = zero3->gathers() - st.gathers0;
    prefetched_last = zero3->prefetched() - st.prefetched0;
    copy_only_last = zero3->copy_only_gathers() - st.copy_only0;
    deferred_last = zero3->deferred_grads() - st.deferred0;
    gathered_peak_last = zero3->gathered_peak_bytes();
  }

  StepInfo info;
  info.step = step;
  info.total_steps = total;
  info.epoch = st.epoch;
  info.loss = last_loss;
  info.loss_scale = st.scale_used;
  info.skipped = skip;
  info.skipped_steps = skipped;
  info.grad_norm = st.norm;
  info.lr = st.lr;
  info.ms = now_ms() - st.t0;
  info.cpu_ms = process_cpu_ms() - st.c0;
  info.samples = st.samples;
  info.tokens = lm ? st.samples * cfg.model.context : 0;
  return info;
}

StepInfo Trainer::Impl::run_step() {
  StepState st = begin_step();
  forward_backward(st);
  reduce_gradients(st);
  unscale_clip_check(st);
  optimizer_step(st);
  sync_parameters();
  return end_step(st);
}

}  // namespace mixp::train
