// The Trainer owns the training loop (docs/architecture.md 3.9, train/study):
//
//   for each optimizer step:
//     zero the gradients
//     for each of the step's micro-batches (grad_accum of them; fewer at the end of an epoch,
//     because an accumulation window never spans two epochs):
//       forward under the recipe's scope, the loss (cross-entropy unless TrainOptions::loss says
//       otherwise), NaN guard on the loss,
//       backward of recipe.scale_loss(loss / micro-batches in this step); on_backward_end
//     on_gradients_ready (callbacks.h: gradient synchronisation and inspection)
//     recipe.unscale_and_check; global gradient norm (clipped to `clip` when set); NaN guard
//     learning rate from the schedule (which advances on taken steps only); recipe.step (the
//     optimizer step, skipped by a loss scaler on inf/NaN gradients); recipe.update
//     on_step_end callbacks (progress, JSONL log); periodic checkpoint
//   evaluate on the evaluation set; final checkpoint
//
// Two ways to build one: from a TrainConfig (a built-in model and data by name, as `mixp train`
// does; build_run.h), or from parts: your own nn::Module, a PrecisionRecipe (make_recipe("bf16")),
// a DataSource (TensorDataset over your tensors, tensor_dataset.h) and TrainOptions. Both run the
// same loop. Data, model and optimizer are built once in the constructor; after the first step a
// step allocates nothing outside the engine's caching allocator (batch buffers are reused).
//
// Resuming (config.resume_dir) restores weights, buffers, optimizer state, the data order and the
// step counter, so N steps + save + resume + N steps equals 2N uninterrupted steps bit for bit.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mixp/nn/module.h"
#include "mixp/optim/optimizer.h"
#include "mixp/tensor/tensor.h"
#include "mixp/train/callbacks.h"
#include "mixp/train/data_source.h"
#include "mixp/train/train_config.h"

namespace mixp::train {

class PrecisionRecipe;

// The loss the Trainer minimises: (the model's output, the batch's target) -> a scalar tensor, the
// mean over the batch. It runs inside the recipe's forward scope (autocast), like the forward pass.
using LossFunction = std::function<Tensor(const Tensor& output, const Tensor& target)>;

// The default loss: cross-entropy of class scores over the last dimension against integer class
// indices (int64 or int32), leading dimensions flattened: [N, C] against [N], and a language
// model's [B, T, V] against [B * T] or [B, T].
Tensor cross_entropy_loss(const Tensor& output, const Tensor& target);

// Builds the optimizer over the model's named parameters, keeping them as the recipe asks
// (`precision`: master weights, write-back rounding, state dtype; pass it to the optimizer's
// options). The Trainer sets the learning rate before every step (TrainOptions::lr, schedule).
using OptimizerFactory = std::function<std::unique_ptr<optim::Optimizer>(
    const nn::NamedTensors& params, const optim::PrecisionOptions& precision)>;

// How a Trainer built from parts trains: TrainConfig's loop settings (the same meanings and
// checks), without the model, data and precision, which are parts of their own.
// (Every member has an initializer, so designated initializers may name any subset.)
struct TrainOptions {
  int64_t epochs = 0;  // exactly one of epochs and steps; neither = 1 epoch
  int64_t steps = 0;   // optimizer steps
  int64_t grad_accum = 1;
  double lr = 1e-3;                      // peak learning rate
  std::string optimizer = "adamw";       // adamw | adam | sgd, unless make_optimizer is set
  std::optional<double> weight_decay{};  // unset = the optimizer's default
  double momentum = 0.9;                 // sgd only
  OptimizerFactory make_optimizer{};     // your own optimizer (checkpoints name it "custom")
  double clip = 0;                       // global L2 norm; 0 = off
  std::string schedule = "constant";     // constant | cosine | warmup_cosine | linear
  int64_t warmup_steps = 0;
  LossFunction loss{};     // empty = cross_entropy_loss
  uint64_t seed = 0;       // stochastic-rounding streams; recorded in checkpoints
  int threads = 0;         // 0 = leave as is
  bool evaluate = true;    // at the end of fit(), when the data source has an evaluation set
  std::string save_dir{};  // final checkpoint ("" = none); save_every: also every N steps
  int64_t save_every = 0;
  std::string resume_dir{};           // continue from a checkpoint of the same model and parts
  std::string model_name = "custom";  // the result's and checkpoint's "model"
};

struct EvalResult {
  std::optional<double> accuracy;  // classifiers: fraction of test samples classified correctly
  double loss = 0;                 // mean cross-entropy per sample (gpt: per token)
  int64_t samples = 0;             // test images, or validation windows for gpt
  std::string evaluated;           // evaluate_checkpoint: what ran ("fp32", "int8", "nf4 weights, bf16 compute")
  double time_s = 0;               // evaluate_checkpoint: wall time of the evaluation loop
  int64_t weight_bytes = 0;        // evaluate_checkpoint: bytes of the weights evaluated
};

// What `mixp train --json` prints (result_to_json gives the exact object).
struct TrainResult {
  std::string model, precision, optimizer, data;
  int64_t steps = 0;  // optimizer steps done, resumed ones included
  int64_t steps_this_run = 0;
  int64_t skipped_steps = 0;  // steps the loss scaler skipped (inf/NaN), resumed included
  int64_t skipped_steps_this_run = 0;
  double loss_scale = 1.0;  // the loss scale at the end (1 without loss scaling)
  std::string recipe;       // PrecisionRecipe::describe(): what is stored/computed/scaled in what
  std::string layer_precision;  // the --layer-precision rules, "" for none
  double epochs = 0;            // passes over the training data done (fractional), resumed included
  double ms_per_step = 0;       // median over this run's steps, the first excluded
  double cpu_ms_per_step = 0;   // the same for the process CPU time of a step (all threads)
  double samples_per_s = 0;     // samples per optimizer step / median step time
  double tokens_per_s = 0;      // gpt only (samples_per_s * context)
  std::optional<double> test_accuracy;  // classifiers
  std::optional<double> test_loss;      // classifiers
  std::optional<double> val_loss;       // gpt
  double final_loss = 0;                // loss of the last optimizer step
  // Peak tensor memory of the training loop: the caching allocator of the device it trained on
  // (memory_device: "cpu", or "cuda:0" for the GPU's own allocator, not the host's).
  int64_t peak_memory_bytes = 0;
  int64_t peak_requested_bytes = 0;  // the same peak counting the bytes asked for, not the blocks
  int64_t peak_reserved_bytes = 0;   // peak of blocks held from the system (in use + cached)
  std::string memory_device = "cpu";  // whose allocator the three peaks above are
  int64_t peak_rss_bytes = 0;        // peak resident set of the process
  std::optional<double> energy_joules;  // nullopt when no meter is readable
  std::string energy_source;            // "rapl" or "unavailable"
  double train_time_s = 0;              // the training loop of this run
  double total_time_s = 0;              // construction (data loading) to the end of fit()
  int threads = 0;
  int64_t batch = 0, grad_accum = 1;
  int64_t parameters = 0;  // number of trainable values
  uint64_t seed = 0;
  // Recipe-specific results, printed after test_loss (int8-qat: fake_quant_accuracy,
  // fake_quant_loss, eval_time_s of the int8 model, fake_quant_eval_time_s).
  std::vector<std::pair<std::string, double>> extra_metrics;
  std::vector<double> losses;  // per optimizer step of this run
  std::string saved_to;        // checkpoint folder written at the end ("" = none)
  // Data parallelism (docs/distributed.md); ranks 1 = a single process, and the fields below are
  // then absent from --json. batch stays per rank; samples_per_s counts every rank's samples.
  int ranks = 1;
  std::string grad_comm;            // gradients on the wire
  double comm_bytes_per_step = 0;   // gradient bytes one rank sent per step (mean)
  double comm_param_bytes_per_step = 0;  // ZeRO 3: parameter bytes one rank sent per step (mean)
  double comm_ms_per_step = 0;      // wall time in collectives per step (median)
  // ZeRO 3: wall time the training thread spent in the parameter gathers per step (median):
  // packing, the transfer (or, with prefetch, the wait for what compute did not hide),
  // unpacking; and whether the gathers were prefetched (--zero3-prefetch, MPI_THREAD_MULTIPLE).
  // Of it (medians each): the wait for the prefetch thread, packing this rank's parameters,
  // unpacking the gathered ones; the rest is the blocking broadcasts without prefetch.
  double param_gather_ms_per_step = 0;
  double param_gather_wait_ms_per_step = 0;
  double param_pack_ms_per_step = 0;
  double param_unpack_ms_per_step = 0;
  bool zero3_prefetch = false;
  // Units gathered in the last step, and of them those whose transfer a prefetch had started.
  int64_t param_gathers_last_step = 0;
  int64_t param_gathers_prefetched_last_step = 0;
  // Of them, the head's forward gathers that filled only its weight's 16-bit copy, and the tied
  // head weight gradients computed when backward reached the token embedding (docs/
  // distributed.md, "What is gathered when").
  int64_t param_gathers_copy_only_last_step = 0;
  int64_t head_grads_deferred_last_step = 0;
  // The most parameter bytes gathered at once in the last step: the units held together (whole,
  // in their storage dtype; train/trainer_zero3.h gathered_peak_bytes).
  int64_t param_gathered_peak_bytes_last_step = 0;
  int comm_buckets = 0;             // gradient buckets per step
  int comm_buckets_overlapped = 0;  // of them, started during backward (last step)
  int zero = 0;                     // ZeRO stage (0 to 3)
  int64_t optimizer_state_bytes = 0;  // this rank's optimizer state (moments, master weights)
  int hosts = 1;                      // distinct host names among the ranks
  // Each host name with its number of ranks (in order of its first rank).
  std::vector<std::pair<std::string, int>> ranks_per_host;
  // Whether the gradient reductions went through memory the ranks map (grad_reduce.h) rather
  // than MPI: only when every rank runs on one host (docs/distributed.md, "Shared memory").
  bool shared_memory = false;
  std::string shared_memory_note;  // when off: why
  // What carried the gradients: "shared memory", "mpi", or "nccl" (gradients in a GPU's memory,
  // reduced there: train/data_parallel.h device_reduction()).
  std::string gradient_transport;
  // Whether the run trained (docs/train.md "When a run did not train"): false when the loss of
  // this run's last step or the evaluation loss is not finite, or the loss scaler skipped more
  // than half of this run's optimizer steps. The one rule behind `mixp train`'s exit code 1 and
  // `mixp compare`'s "diverged"; `not_trained` says what happened and what to try.
  bool trained = true;
  std::string not_trained;
};

// The `train --json` object: model, precision, steps, skipped_steps (+ skipped_steps_this_run,
// loss_scale, recipe, layer_precision), ms_per_step, samples_per_s,
// test_accuracy (classifiers) or val_loss (gpt), final_loss, peak_memory_bytes, energy_joules
// (null when unavailable), energy_source, peak_rss_bytes, train_time_s, threads, batch, epochs,
// seed, and more. One line, or indented with `indent` >= 0.
std::string result_to_json(const TrainResult& r, int indent = -1);

class Trainer {
 public:
  // Resolves `config`, sets the thread count, loads the data, builds the model, recipe and
  // optimizer, and restores config.resume_dir when set. Throws ConfigError, data::DataError,
  // TrainError (checkpoint mismatch), IoError.
  explicit Trainer(const TrainConfig& config);
  // From parts: trains `model` (its parameters as they are; the recipe prepares them here, so
  // build the model in fp32 and let the recipe convert it) on `data` with `recipe`
  // (make_recipe(name)). The optimizer is options.make_optimizer's, or the one options.optimizer
  // names. Throws ConfigError for options that cannot run (the messages of TrainConfig::resolved;
  // a save_dir whose parent folder is missing), TrainError (options.resume_dir's checkpoint does
  // not fit), IoError.
  Trainer(std::shared_ptr<nn::Module> model, std::unique_ptr<PrecisionRecipe> recipe,
          std::unique_ptr<DataSource> data, const TrainOptions& options = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Callbacks run in the order they were added (callbacks.h lists the stages).
  void add_callback(std::shared_ptr<TrainCallback> cb);

  // Trains up to the configured epochs/steps, evaluates (config.evaluate), writes the final
  // checkpoint (config.save_dir). Throws TrainError when the NaN guard fires (no checkpoint is
  // written then) and whatever a callback throws.
  TrainResult fit();
  // Runs `n` more optimizer steps (beyond the configured total if need be) without evaluation or
  // checkpoints; returns the losses. For tests and custom loops.
  std::vector<double> train_steps(int64_t n);
  EvalResult evaluate();
  // Writes a checkpoint of the current state to `dir`, atomically (the folder appears complete or
  // not at all; an existing one is replaced).
  void save(const std::filesystem::path& dir) const;

  const TrainConfig& config() const;  // resolved
  int64_t step() const;               // optimizer steps done
  int64_t total_steps() const;        // the run's target
  int64_t steps_per_epoch() const;
  nn::Module& model();
  optim::Optimizer& optimizer();
  const PrecisionRecipe& recipe() const;
  // The training data (where it stands: epoch(), position(); a TensorDataset's shard).
  DataSource& data();
  std::string data_description() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// `mixp eval`: rebuilds the model from a checkpoint's config, loads its weights and evaluates on
// the checkpoint's test set (or `data` when not empty). `precision` "" keeps the checkpoint's.
EvalResult evaluate_checkpoint(const std::filesystem::path& dir, const std::string& precision = "",
                               const std::string& data = "");

// The general form of `mixp eval` (docs/quantization.md):
//   - a checkpoint holding int8_model.safetensors (int8-qat, `mixp quantize`) runs that int8
//     model unless `precision` names another recipe; precision "int8" requires it;
//   - `weights` "nf4" / "int4": the Linear layers get weight-only 4-bit weights (blocks of 64),
//     computed in `compute` (bf16 or fp32);
//   - a model.safetensors whose tensors were re-encoded by `mixp convert --to nf4|int4` is read
//     as such (Linear weights kept in 4 bits, everything else decoded to fp32).
struct EvalOptions {
  std::string precision;  // "" = the checkpoint's
  std::string data;       // "" = the checkpoint's
  std::string weights;    // "" | nf4 | int4
  std::string compute = "bf16";
  bool double_quant = false;
};
EvalResult evaluate_checkpoint(const std::filesystem::path& dir, const EvalOptions& opt);

}  // namespace mixp::train
