// The Trainer's state (internal), shared by trainer.cpp (the loop), trainer_state.cpp
// (checkpoints) and evaluate.cpp.
#pragma once
#include <array>
#include <cmath>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "batch_source.h"
#include "mixp/io/atomic_file.h"
#include "mixp/io/safetensors.h"
#include "mixp/nn/module.h"
#include "mixp/optim/optimizer.h"
#include "mixp/train/build_run.h"
#include "mixp/train/checkpoint.h"
#include "mixp/train/data_parallel.h"
#include "mixp/train/metrics.h"
#include "mixp/train/recipe.h"
#include "mixp/train/trainer.h"
#include "tensor_bytes.h"
#include "trainer_zero3.h"

namespace mixp::train::detail {

// The model the config describes (vocab and context already filled in for gpt), with the recipe
// applied to its parameters. with_init: load c.init_from first (a fresh training run; a resumed
// run or an evaluation gets its weights from the checkpoint).
std::shared_ptr<nn::Module> build_model(const TrainConfig& c, const PrecisionRecipe& recipe,
                                        bool with_init = false);
// The model config with every 0 replaced by the model's default (ConfigError for a field the
// model does not have).
nn::ModelConfig resolve_model(const nn::ModelConfig& m);
// A llama-family run with --init-from DIR: the model's shape from DIR/config.json (ConfigError
// when it is not a LLaMA-family config), the context the run's (else the config's, at most 1024).
void apply_llama_hf_shape(TrainConfig& c);
// The optimizer the config names over the model's named parameters (state names follow them:
// "fc1.weight.exp_avg").
std::unique_ptr<optim::Optimizer> build_optimizer(const TrainConfig& c,
                                                  const nn::NamedTensors& params,
                                                  const optim::PrecisionOptions& precision = {});
// Learning rate of optimizer step `step` (0-based) of a run of `total` steps.
double schedule_lr(const TrainConfig& c, int64_t step, int64_t total);
// Optimizer state: tensors to safetensors entries and scalars to JSON, and back.
void save_optimizer_state(const optim::Optimizer& opt, SafeTensorsFile& tensors,
                          nlohmann::json& scalars);
// `shard`: the optimizer holds a part of the parameters (ZeRO, data_parallel.h); the file's
// entries for the other parameters are skipped instead of refused. `rows` (ZeRO 3): by
// parameter name, the rows of it the optimizer's parameter of that name holds; its states are
// those rows of the file's whole ones.
void load_optimizer_state(optim::Optimizer& opt, const SafeTensorsFile& tensors,
                          const nlohmann::json& scalars, const std::string& source,
                          bool shard = false,
                          const std::map<std::string, RowPiece>* rows = nullptr);

// TrainError unless state.json's "recipe.name" (when recorded) is the name of `recipe`, the one
// its "config.precision" makes (check_checkpoint_config and the resume path both ask).
void check_recorded_recipe_name(const std::string& source, const nlohmann::json& state,
                                const std::string& precision, const PrecisionRecipe& recipe);

// The states of the model's Dropout mask streams ({"name": {"seed", "counter"}}), and back. The
// built-in models have no dropout; a custom model with some still resumes bit-identically.
nlohmann::json dropout_streams(nn::Module& model);
void restore_dropout_streams(nn::Module& model, const nlohmann::json& streams);

// What TrainResult::trained and not_trained say about a finished run (train_outcome.cpp,
// docs/train.md "When a run did not train"): "" when it trained, else what happened and what to
// try. `lr`: the run's peak learning rate; `loss_scaled`: its recipe skips steps on inf/NaN.
std::string not_trained_reason(const TrainResult& r, double lr, bool loss_scaled);

// Mean loss and accuracy of `model` over `source`'s evaluation set, in eval mode without gradients.
// The loss of a batch is weighted by its number of targets (rows for cross-entropy: samples, gpt:
// tokens); the accuracy is reported for classifiers (not language models) whose output is [N, C]
// against [N] integer targets.
// In a data-parallel run (`group` of more than one rank) each rank evaluates the batches its
// source hands it and the sums are all-reduced: every rank returns the global result.
EvalResult evaluate_model(nn::Module& model, DataSource& source, const PrecisionRecipe& recipe,
                          bool language_model, const LossFunction& loss = cross_entropy_loss,
                          dist::ProcessGroup* group = nullptr);

// Finds an unusable checkpoint folder before training rather than after it: ConfigError when it
// exists and is not a folder, or when its parent folder does not exist.
void check_save_dir(const std::filesystem::path& dir);

// The checks of TrainConfig::resolved() that concern the loop (length, batch, optimizer, schedule,
// clipping, ...), not the model or data; shared with the Trainer built from parts.
void check_loop_config(const TrainConfig& c);

}  // namespace mixp::train::detail

namespace mixp::train {

struct Trainer::Impl {
  TrainConfig cfg;  // resolved, vocab and context filled in
  bool lm = false;
  bool custom_model = false;  // built from parts (its forward may checkpoint: see DataParallel)
  std::unique_ptr<DataSource> source;
  std::unique_ptr<PrecisionRecipe> recipe;
  std::shared_ptr<nn::Module> model;
  std::vector<Tensor> params;  // cached: the step loop never rebuilds the list
  std::vector<std::string> param_names;  // theirs
  std::unique_ptr<optim::Optimizer> opt;
  LossFunction loss = cross_entropy_loss;
  bool default_loss = true;  // `loss` is cross_entropy_loss: a GPT computes it in its forward
  std::vector<std::shared_ptr<TrainCallback>> callbacks;

  int64_t step = 0;  // optimizer steps done
  int64_t total = 0;
  int64_t steps_per_epoch = 1;
  int64_t skipped = 0;           // steps skipped by the loss scaler, resumed ones included
  int64_t skipped_at_start = 0;  // of this run (fit())
  double last_loss = 0;
  double prior_train_time_s = 0;  // from the resumed checkpoint
  double constructed_ms = 0;
  std::vector<double> losses;                         // this run
  StepTimes times;                                    // this run
  StepTimes cpu_times;                                // this run, process CPU time
  nlohmann::json metrics = nlohmann::json::object();  // saved in state.json
  // The --resume checkpoint, read (and verified) once by check_resume_config for resume().
  mutable std::shared_ptr<const CheckpointFiles> resumed;
  // The --save folder's lock, held from construction to destruction (io/atomic_file.h).
  std::unique_ptr<FolderLock> save_lock;
  // Data parallelism (data_parallel.h): null in a single process.
  std::unique_ptr<DataParallel> dp;
  std::vector<int> owner;          // ZeRO 1-2: the rank that owns each of params (else empty)
  // ZeRO 1-2: the params this rank owns, in order; ZeRO 3: its pieces (rows) of them.
  std::vector<Tensor> owned;
  // ZeRO 3 (trainer_zero3.h): the parameters gathered around each unit's forward and backward.
  std::unique_ptr<Zero3> zero3;
  std::vector<double> comm_ms;     // per step of this run
  // ZeRO 3: time in the parameter gathers per step: all, waiting, packing, unpacking
  std::vector<std::array<double, 4>> gather_ms;
  uint64_t gathers_last = 0, prefetched_last = 0;  // ZeRO 3: in the last step
  uint64_t copy_only_last = 0, deferred_last = 0;    // ZeRO 3: in the last step
  uint64_t gathered_peak_last = 0;  // ZeRO 3: Zero3::gathered_peak_bytes() of the last step
  uint64_t comm_bytes_total = 0;   // gradient bytes sent by this rank in this run
  uint64_t comm_param_bytes_total = 0;  // ZeRO 3: parameter bytes sent by this rank in this run

  // --optimizer-in-backward (train_config.h): per parameter (the optimizer's order, which is
  // params' order without ZeRO), the squared norm of its gradient, taken right before its update
  // frees it, and how often backward reported it in this step.
  std::vector<double> grad_sq;
  std::vector<int> reported;
  // Each parameter's index in params (= in opt->params(), check_optimizer_in_backward), by its
  // TensorImpl: the hook finds a reported leaf in O(1), not by a scan of every parameter.
  std::unordered_map<const TensorImpl*, size_t> param_index;
  bool nonfinite_grad = false;  // a gradient was not finite: no later parameter was updated

  bool is_rank0() const { return !dp || dp->rank() == 0; }
  dist::ProcessGroup* group() const { return dp ? &dp->group() : nullptr; }

  // Takes the parts (the model prepared by the recipe, the configuration resolved) and builds the
  // optimizer: what both constructors share.
  void init(RunParts parts, const OptimizerFactory& make_optimizer);
  // Refuses (ConfigError naming the flag) a configuration that differs from the checkpoint's
  // where it must match; before build_run(), so that nothing is loaded for a run that cannot go on.
  void check_resume_config(const std::filesystem::path& dir) const;
  void resume(const std::filesystem::path& dir);
  void check_resume_data(const nlohmann::json& state, const std::string& state_file) const;
  // One optimizer step: the phases below, in this order (trainer_step.cpp).
  StepInfo run_step();
  // What one step's phases hand each other.
  struct StepState {
    double t0 = 0, c0 = 0, comm0 = 0;  // wall and CPU clocks, time in collectives at the start
    int64_t window = 1;                // micro-batches in this step
    int64_t epoch = 0;
    double loss = 0;      // the step's mean loss (global in a data-parallel run)
    int64_t samples = 0;  // the step's samples (global in a data-parallel run)
    double global_loss = 0;
    int64_t global_samples = 0;
    double norm = std::nan("");  // the gradient norm (NaN when not finite or not computed)
    double lr = 0;
    double scale_used = 1.0;  // what the step's losses were multiplied by
    bool stepped = true;      // false: the loss scaler skipped the step
    uint64_t param_bytes0 = 0;      // ZeRO 3: Zero3::bytes_sent() at the step's start
    uint64_t param_bytes_sync = 0;  // Zero3::group_bytes_sent() when the gradient-sync stage began
    // ZeRO 3: Zero3::gather_ms(), wait_ms(), pack_ms(), unpack_ms() at the step's start
    std::array<double, 4> gather0{};
    uint64_t gathers0 = 0, prefetched0 = 0;  // Zero3::gathers(), prefetched()
    uint64_t copy_only0 = 0, deferred0 = 0;  // Zero3::copy_only_gathers(), deferred_grads()
  };
  StepState begin_step();                        // clear gradients, buffers, window
  Tensor forward_loss(const Batch& b);           // one micro-batch's loss
  void forward_backward(StepState& st);          // every micro-batch, forward and backward
  void reduce_gradients(StepState& st);          // data parallelism; on_gradients_ready
  void unscale_clip_check(StepState& st);        // loss scaling, clipping, the NaN guard
  void optimizer_step(StepState& st);            // learning rate and update
  void sync_parameters();                        // ZeRO: parameters from their owners
  StepInfo end_step(const StepState& st);        // loss-scale update, counters, StepInfo
  StepContext step_context(const StepState& st, int64_t micro, double loss);
  // --optimizer-in-backward: refuses (ConfigError) what it cannot do exactly.
  void check_optimizer_in_backward() const;
  // The grad-ready hook of --optimizer-in-backward: steps `leaf` (when it is a parameter) and
  // frees its gradient.
  void step_in_backward(const Tensor& leaf);
  void save(const std::filesystem::path& dir) const;
  [[noreturn]] void nonfinite_error(const std::string& what, double value, int64_t micro,
                                    int64_t window) const;
};

}  // namespace mixp::train
