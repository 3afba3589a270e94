// What one training run does: the model, the data, the precision recipe, the length of the run,
// the optimizer and its schedule, and where checkpoints and logs go. `mixp train` fills it from its
// flags (docs/architecture.md 4.2); a checkpoint stores it in state.json so that `mixp eval` and
// `--resume` rebuild the same run.
//
// Zero means "the model's default" for the numeric fields below (docs/architecture.md 5b: mlp and
// cnn train with batch 128 and AdamW at lr 1e-3, gpt with batch 16 and lr 3e-4); resolved() fills
// them in.
#pragma once
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "mixp/nn/models.h"

namespace mixp::train {

// A configuration that cannot run (both epochs and steps, a non-positive batch, an unknown
// optimizer, ...). Derives from std::invalid_argument: it is the caller's mistake, and the CLI
// reports it as a usage error.
class ConfigError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// A failure while training that is not a bug and not bad configuration: a non-finite loss or
// gradient (the NaN guard), a checkpoint that does not match the model.
class TrainError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The `data` keyword that selects generated data (synthetic_images / synthetic_corpus of the data
// module) instead of files: for tests and demos on machines without the dataset packages.
inline constexpr const char* kSyntheticData = "synthetic";
// The `data` keyword for Debian's Fashion-MNIST folder (also the default for mlp and cnn).
inline constexpr const char* kFashionMnistData = "fashion-mnist";

struct TrainConfig {
  nn::ModelConfig model;  // name ("mlp", "cnn", "gpt") and shape; model.seed 0 = `seed` below

  // "" = the model's default (Fashion-MNIST for mlp/cnn, /usr/share/games/fortunes for gpt),
  // "fashion-mnist", "synthetic", or a path: a folder of IDX files (mlp/cnn), a text file or
  // folder (gpt).
  std::string data;
  int64_t train_limit = 0;  // keep the first N training samples (0 = all); gpt: first N tokens
  int64_t test_limit = 0;   // evaluate on the first N test samples (gpt: N validation windows)

  // Precision recipe (recipe.h, docs/amp-training.md): fp64 fp32 tf32 bf16 bf16-pure fp16
  // fp16-o2 fp16-pure auto, or a policy string "bf16:params=fp32,compute=bf16,output=fp32".
  // The Trainer replaces `auto` by the recipe it picked.
  std::string precision = "fp32";
  std::string layer_precision;                 // per-layer rules, "embed=fp32,attn=bf16,head=fp32"
  std::optional<double> loss_scale_init;       // dynamic loss scaling (fp16 recipes) only
  std::optional<int64_t> growth_interval;      // dynamic loss scaling (fp16 recipes) only
  std::optional<int64_t> qat_freeze_bn_epoch;  // int8-qat only (recipe.h)
  std::optional<int64_t> qat_disable_observer_epoch;  // int8-qat only
  // LoRA adapters (nn/lora.h, docs/lora.md): "r=16,alpha=32,dropout=0.05,targets=qkv,proj"; ""
  // = full training. With it the base model is frozen and only the adapters train.
  std::string lora;
  // A PEFT adapter directory (adapter_model.safetensors + adapter_config.json, nn/lora_io.h) to
  // start the adapters from (fresh runs only; its adapter_config.json sets `lora`, so the two
  // are not given together); and where to write the trained adapters at the end of the run
  // (every checkpoint folder of a LoRA run holds them too).
  std::string lora_from;
  std::string lora_out;

  // Length: exactly one of epochs and steps may be set; neither = 1 epoch. Both count the whole
  // run, resumed steps included: resuming a checkpoint of step 100 with steps = 200 runs 100 more.
  int64_t epochs = 0;
  int64_t steps = 0;  // optimizer steps

  int64_t batch = 0;       // samples per micro-batch (gpt: sequences); 0 = model default
  int64_t grad_accum = 1;  // micro-batches per optimizer step; the loss of each is divided by it
  double lr = 0;           // peak learning rate; 0 = model default
  std::string optimizer = "adamw";     // adamw | adam | sgd
  std::optional<double> weight_decay;  // unset = the optimizer's default
  double momentum = 0.9;               // sgd only
  double clip = 0;                     // clip gradients to this global L2 norm; 0 = off
  // The optimizer fused into backward (PyTorch's "optimizer in backward", docs/amp.md): each
  // parameter is updated, and its gradient freed, as soon as backward has finished its gradient
  // (autograd/grad_ready_hook.h), so the gradients never all exist at once. Bit-identical to the
  // ordinary step (every update reads only its own parameter's gradient and state). Refused
  // where the step needs every gradient first: clipping (clip > 0), grad_accum > 1, loss
  // scaling (the fp16 recipes' found-inf check), data parallelism (more than one rank), and
  // callbacks that read the gradients (--inspect, GradientFunctionCallback).
  bool optimizer_in_backward = false;
  std::string schedule =
      "constant";            // constant | cosine | warmup_cosine | linear (to 0 at the end)
  int64_t warmup_steps = 0;  // linear warmup from 0 to lr

  uint64_t seed = 0;     // model initialization and data order
  int threads = 0;       // OpenMP/oneDNN threads; 0 = leave as is (all cores)
  bool evaluate = true;  // evaluate on the test set (validation split for gpt) at the end

  std::string save_dir;    // write a checkpoint here at the end ("" = none)
  int64_t save_every = 0;  // also every N optimizer steps (0 = only at the end)
  std::string resume_dir;  // continue from this checkpoint ("" = start fresh)
  // gpt2 / gpt2-medium: start from these GPT-2 weights (an llm.c model .bin, a Hugging Face or mixp
  // safetensors file; nn/gpt2_weights.h) instead of a random init. Ignored when resuming.
  std::string init_from;
  std::string log_path;  // JSON Lines, one line per optimizer step ("" = none)

  // Data parallelism, when started by mpirun (docs/distributed.md); a single process ignores
  // them. `batch` stays per rank: the global batch is batch x ranks.
  std::string grad_comm = "fp32";  // gradients on the wire: fp32 | bf16 | fp16 | bf16-ring
  double bucket_mb = 25;           // MiB of fp32 gradient per reduction bucket
  bool comm_overlap = true;        // reduce buckets during backward (same results either way)
  double comm_timeout = 60;        // seconds a rank waits for the others (0 = forever)
  int64_t check_replicas = 0;      // compare the ranks' parameter checksums every N steps
  int zero = 0;  // ZeRO stage: 1 optimizer state and master weights sharded, 2 gradients too
  // ZeRO 3: each unit's parameter gather started while the unit before it computes, on a thread
  // of its own (src/train/zero3_prefetch.h; the same results either way)
  bool zero3_prefetch = true;

  // The effective configuration: model defaults filled in (batch, lr, data, shape), model.seed
  // set, and every field checked. Throws ConfigError naming the field, the value and what is
  // accepted. The vocabulary of gpt is left 0 here; the Trainer sets it from the corpus.
  TrainConfig resolved() const;
};

// Known optimizer names, for messages and --help.
const std::vector<std::string>& optimizer_names();
const std::vector<std::string>& schedule_names();

// Default micro-batch size and learning rate of a built-in model (docs/architecture.md 5b).
int64_t default_batch(std::string_view model);
double default_lr(std::string_view model);
// True for models trained on token sequences (gpt), false for image classifiers.
bool is_language_model(std::string_view model);

// state.json's "config" object: every field above, model shape included. Lossless for doubles
// (shortest round-trip representation).
std::string config_to_json(const TrainConfig& c);
// Parses config_to_json's output. Unknown keys are ignored and missing ones keep their defaults,
// so checkpoints of older versions still load. Throws ConfigError for a malformed document.
TrainConfig config_from_json(std::string_view json);

}  // namespace mixp::train
