// `mixp train`: parses the flags of docs/architecture.md 4.2 into a TrainConfig, runs the library's
// Trainer, and prints a summary (or one JSON object with --json). Printing only.
#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>

#include "command.h"
#include "flag_range.h"
#include "device_flag.h"
#include "mixp/dist/process_group.h"
#include "mixp/amp/policy.h"
#include "mixp/data/text_corpus.h"
#include "mixp/data/token_file.h"
#include "mixp/nn/models.h"
#include "mixp/study/memory_check.h"
#include "mixp/train/checkpoint.h"
#include "mixp/train/inspect_callback.h"
#include "mixp/train/recipe_registry.h"
#include "mixp/train/trainer.h"
#include "train_progress.h"

namespace mixp::cli {
namespace {

std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

// Everything the flags can set, kept apart from the TrainConfig so that a resumed run can apply
// only the flags that were actually given on top of the checkpoint's configuration.
struct Flags {
  train::TrainConfig c;
  // CLI11 2.1 has no std::optional options: these become the config's optionals when given.
  double loss_scale_init = 0, weight_decay = 0;
  int64_t growth_interval = 0;
  int64_t qat_freeze_bn_epoch = 0, qat_disable_observer_epoch = 0;
  bool json = false;
  std::string device = "cpu";  // --device (not saved: a run may resume on another device)
  // Looking inside the run (docs/inspect.md); not part of the TrainConfig (not saved, not resumed).
  std::string inspect;
  bool detect_anomaly = false, profile = false;
  std::string profile_trace;
  CLI::App* sub = nullptr;
  bool given(const char* name) const { return sub->count(name) > 0; }
};

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return u == 0 ? fmt::format("{:.0f} B", b) : fmt::format("{:.1f} {}", b, units[u]);
}

// A data-parallel run (docs/distributed.md): its ranks, hosts, gradient wire and ZeRO stage.
std::string distributed_text(const train::TrainResult& r) {
  if (r.ranks <= 1) return "";
  return fmt::format(" per rank x {} ranks{}, gradients {} on the wire, ZeRO stage {}", r.ranks,
                     r.hosts > 1 ? fmt::format(" on {} hosts", r.hosts) : "", r.grad_comm,
                     r.zero);
}

// GPT-2 trained on a character corpus (no --data, or a text file) has that corpus' vocabulary,
// not GPT-2's tokens: said, since nothing else would show it.
std::string vocabulary_note(const train::TrainConfig& c, int64_t vocab) {
  if (!nn::is_gpt2_model(c.model.name) || vocab <= 0 || vocab == nn::kGpt2Vocab) return "";
  if (data::is_token_file(c.data)) {
    return fmt::format(" (vocabulary {} of the token file's tokenizer, not GPT-2's {})", vocab,
                       nn::kGpt2Vocab);
  }
  const bool fortunes = c.data.empty() || c.data == data::kDefaultCorpusDir;
  return fmt::format(" (vocabulary {} from {}: not GPT-2's {}; --data takes a GPT-2 token file)",
                     vocab, fortunes ? std::string("the fortunes corpus") : c.data,
                     nn::kGpt2Vocab);
}

void print_summary(const train::TrainResult& r, const train::TrainConfig& c, int64_t vocab) {
  std::cout << fmt::format(
      "trained {} in {} with {} (lr {:g}), batch {}{}{}: {} steps ({:.2f} epochs){}\n", r.model,
      r.precision, c.optimizer, c.lr, r.batch,
      r.grad_accum > 1 ? fmt::format(" x {} accumulated", r.grad_accum) : "",
      distributed_text(r), r.steps, r.epochs,
      r.steps_this_run != r.steps ? fmt::format(", {} in this run", r.steps_this_run) : "");
  std::cout << "data:      " << r.data << vocabulary_note(c, vocab) << "\n";
  std::cout << fmt::format("loss:      {:.4f} (last step)", r.final_loss);
  if (r.test_accuracy)
    std::cout << fmt::format("   test accuracy {:.2f}%   test loss {:.4f}", 100 * *r.test_accuracy,
                             r.test_loss.value_or(NAN));
  if (r.val_loss) std::cout << fmt::format("   validation loss {:.4f}", *r.val_loss);
  std::cout << "\n";
  if (!r.extra_metrics.empty()) {
    std::string extra;
    for (const auto& [k, v] : r.extra_metrics) {
      // Counts (trainable_parameters) in full; measurements to 6 digits.
      const bool count = v == std::floor(v) && std::fabs(v) < 9e15;
      extra += fmt::format("{}{} ", extra.empty() ? "" : ", ", k) +
               (count ? std::to_string(int64_t(v)) : fmt::format("{:.6g}", v));
    }
    std::cout << "also:      " << extra << "\n";
  }
  std::cout << fmt::format("speed:     {:.2f} ms/step (median), {:.0f} samples/s", r.ms_per_step,
                           r.samples_per_s);
  if (r.tokens_per_s > 0) std::cout << fmt::format(", {:.0f} tokens/s", r.tokens_per_s);
  std::cout << fmt::format(", {:.1f} s training on {} thread{}{}\n", r.train_time_s, r.threads,
                           r.threads == 1 ? "" : "s", r.ranks > 1 ? " per rank" : "");
  if (r.ranks > 1) {
    // Where the ranks ran and how the gradients travelled (docs/distributed.md).
    std::string hosts;
    for (const auto& [host, n] : r.ranks_per_host) {
      hosts += fmt::format("{}{} x {}", hosts.empty() ? "" : ", ", host, n);
    }
    std::cout << fmt::format(
        "ranks:     {} on {} host{} ({}), {} thread{} per rank, gradients {} on the wire, "
        "shared-memory reduction {}, {} sent per step per rank{}\n",
        r.ranks, r.hosts, r.hosts == 1 ? "" : "s", hosts, r.threads, r.threads == 1 ? "" : "s",
        r.grad_comm, r.shared_memory ? "on" : "off (" + r.shared_memory_note + ")",
        human_bytes(r.comm_bytes_per_step),
        // ZeRO 3: the parameters this rank's owners sent to the others' gathers.
        r.zero == 3 ? fmt::format(" (gradients; parameters {}, {}, {:.1f} ms/step gathering)",
                                  human_bytes(r.comm_param_bytes_per_step),
                                  r.zero3_prefetch ? "prefetched" : "not prefetched",
                                  r.param_gather_ms_per_step)
                    : std::string());
  }
  std::cout << fmt::format("memory:    peak tensors {}, peak RSS {}\n",
                           human_bytes(double(r.peak_memory_bytes)),
                           human_bytes(double(r.peak_rss_bytes)));
  std::cout << "energy:    "
            << (r.energy_joules ? fmt::format("{:.1f} J ({})", *r.energy_joules, r.energy_source)
                                : std::string("unavailable (no readable RAPL counters)"))
            << "\n";
  std::cout << "precision: " << r.recipe << "\n";
  if (r.skipped_steps > 0 || r.loss_scale != 1.0) {
    std::cout << fmt::format(
        "scaling:   loss scale {:g} at the end, {} step{} skipped (inf/NaN "
        "gradients){}\n",
        r.loss_scale, r.skipped_steps, r.skipped_steps == 1 ? "" : "s",
        r.skipped_steps != r.skipped_steps_this_run
            ? fmt::format(", {} in this run", r.skipped_steps_this_run)
            : "");
  }
  if (!r.saved_to.empty()) std::cout << "saved:     " << r.saved_to << "\n";
}

// Throws (exit 1) when the planner says the run's peak exceeds the available memory. A
// configuration the planner cannot price (it throws) is left to the Trainer, which says what is
// wrong with it; one whose model alone cannot be allocated for the plan cannot run either.
void refuse_if_it_cannot_fit(const train::TrainConfig& c) {
  train::TrainConfig rc;
  study::MemoryNeed need;
  try {
    rc = c.resolved();
    need = study::plan_training_memory(rc);
  } catch (const std::bad_alloc&) {
    throw std::runtime_error(fmt::format(
        "not enough memory: the {} model alone (width {}, layers {}) cannot be allocated, {} "
        "available; a smaller --width or --layers needs less",
        rc.model.name, rc.model.width, rc.model.layers,
        human_bytes(double(study::available_memory_bytes()))));
  } catch (const std::exception&) {
    return;
  }
  if (auto why = study::memory_shortfall(rc, need, study::available_memory_bytes())) {
    throw std::runtime_error(*why);
  }
}

void run(Flags& f) {
  // The run's configuration: the checkpoint's when resuming, with the given flags on top.
  train::TrainConfig c;
  if (f.given("--resume")) {
    // docs/train.md "Resuming": every flag given below overrides the checkpoint's value, and the
    // Trainer refuses the ones that must match the checkpoint (model, shape, precision, optimizer,
    // batch, ...) when their value differs. Only given flags count: a default never overrides.
    if (train::checkpoint_is_unverified(f.c.resume_dir)) {
      std::cerr << "mixp train: warning: checkpoint " << f.c.resume_dir
                << " has no manifest.json (written by an older mixp), so its files cannot be "
                   "verified; save it again with this mixp to add one\n";
    }
    c = train::read_checkpoint_config(f.c.resume_dir);
    c.save_dir.clear();  // outputs of the earlier run are not this run's
    c.save_every = 0;
    c.log_path.clear();
    c.evaluate = true;  // so is the final evaluation: --no-eval applies to its own run only
  } else if (!f.given("--model")) {
    throw UsageError("--model is required (one of: " + join(nn::model_names()) +
                     "), unless --resume continues a checkpoint");
  }
  if (f.given("--epochs") && f.given("--steps")) {
    throw UsageError(
        "--epochs and --steps both given; give one (epochs counts passes over the "
        "data, steps counts optimizer steps)");
  }
  // Zero means "the default" inside TrainConfig; on the command line it is a mistake.
  auto positive = [&](const char* flag, double v) {
    if (f.given(flag) && !(v > 0))
      throw UsageError(fmt::format("{} must be positive, got {:g}", flag, v));
  };
  positive("--batch", double(f.c.batch));
  positive("--epochs", double(f.c.epochs));
  positive("--steps", double(f.c.steps));
  positive("--grad-accum", double(f.c.grad_accum));
  positive("--lr", f.c.lr);
  positive("--threads", double(f.c.threads));
  positive("--save-every", double(f.c.save_every));
  auto set = [&](const char* flag, auto& dst, const auto& src) {
    if (f.given(flag) || !f.given("--resume")) dst = src;
  };
  set("--model", c.model.name, f.c.model.name);
  set("--width", c.model.width, f.c.model.width);
  set("--layers", c.model.layers, f.c.model.layers);
  set("--heads", c.model.heads, f.c.model.heads);
  set("--context", c.model.context, f.c.model.context);
  set("--mlp-width", c.model.mlp_width, f.c.model.mlp_width);
  set("--kv-heads", c.model.kv_heads, f.c.model.kv_heads);
  set("--checkpointing", c.model.checkpointing, f.c.model.checkpointing);
  set("--data", c.data, f.c.data);
  set("--train-limit", c.train_limit, f.c.train_limit);
  set("--test-limit", c.test_limit, f.c.test_limit);
  set("--precision", c.precision, f.c.precision);
  set("--layer-precision", c.layer_precision, f.c.layer_precision);
  set("--lora", c.lora, f.c.lora);
  set("--lora-from", c.lora_from, f.c.lora_from);
  c.lora_out = f.c.lora_out;  // an output of this run, as --save
  if (f.given("--loss-scale-init")) c.loss_scale_init = f.loss_scale_init;
  if (f.given("--growth-interval")) c.growth_interval = f.growth_interval;
  if (f.given("--qat-freeze-bn-epoch")) c.qat_freeze_bn_epoch = f.qat_freeze_bn_epoch;
  if (f.given("--qat-disable-observer-epoch")) {
    c.qat_disable_observer_epoch = f.qat_disable_observer_epoch;
  }
  if (f.given("--epochs") || f.given("--steps") || !f.given("--resume")) {
    c.epochs = f.c.epochs;
    c.steps = f.c.steps;
  }
  set("--batch", c.batch, f.c.batch);
  set("--grad-accum", c.grad_accum, f.c.grad_accum);
  set("--lr", c.lr, f.c.lr);
  set("--optimizer", c.optimizer, f.c.optimizer);
  if (f.given("--weight-decay")) c.weight_decay = f.weight_decay;
  set("--momentum", c.momentum, f.c.momentum);
  set("--clip", c.clip, f.c.clip);
  set("--optimizer-in-backward", c.optimizer_in_backward, f.c.optimizer_in_backward);
  set("--schedule", c.schedule, f.c.schedule);
  set("--warmup", c.warmup_steps, f.c.warmup_steps);
  set("--seed", c.seed, f.c.seed);
  set("--threads", c.threads, f.c.threads);
  set("--no-eval", c.evaluate, f.c.evaluate);
  c.save_dir = f.c.save_dir;
  c.save_every = f.c.save_every;
  c.resume_dir = f.c.resume_dir;
  c.log_path = f.c.log_path;
  set("--grad-comm", c.grad_comm, f.c.grad_comm);
  set("--bucket-mb", c.bucket_mb, f.c.bucket_mb);
  set("--no-comm-overlap", c.comm_overlap, f.c.comm_overlap);
  set("--comm-timeout", c.comm_timeout, f.c.comm_timeout);
  set("--check-replicas", c.check_replicas, f.c.check_replicas);
  set("--zero", c.zero, f.c.zero);
  set("--zero3-prefetch", c.zero3_prefetch, f.c.zero3_prefetch);
  // In a data-parallel run only rank 0 logs and reports (the ranks' results are the same).
  const bool rank0 = dist::world().rank() == 0;
  if (!rank0) c.log_path.clear();
  set("--init-from", c.init_from, f.c.init_from);  // a resumed run loads the checkpoint instead

  train::InspectOptions look;
  try {
    if (f.given("--inspect")) look.inspect = inspect::parse_inspect_spec(f.inspect);
  } catch (const inspect::InspectError& e) {
    throw UsageError(e.what());
  }
  look.detect_anomaly = f.detect_anomaly;
  look.profile = f.profile;
  look.profile_trace = f.profile_trace;

  // Every tensor of the run (model, optimizer state, batches) is made on this device.
  const DefaultDeviceGuard on_device(parse_device_flag(f.device, /*allow_guarded=*/true));
  if (default_device().kind == DeviceKind::guarded) {
    // The guarded device's access check (tensor/device.h DeviceAccessScope) covers the thread
    // that calls a kernel, not the kernel's OpenMP workers: it computes on one thread.
    if (f.given("--threads") && c.threads != 1) {
      throw UsageError(fmt::format(
          "--device guarded computes on one thread (its access check covers the calling thread "
          "only); give --threads 1 or leave --threads out, not {}",
          c.threads));
    }
    c.threads = 1;
  }
  // Memory the run cannot have is refused now, with what it needs, rather than by a
  // std::bad_alloc while the Trainer allocates its batch buffers or mid-step
  // (study/memory_check.h; docs/cli.md "Numeric flags").
  if (default_device().is_host_memory()) refuse_if_it_cannot_fit(c);
  std::unique_ptr<train::Trainer> trainer;
  try {
    trainer = std::make_unique<train::Trainer>(c);
  } catch (const train::ConfigError& e) {
    throw UsageError(e.what());
  }
  const train::TrainConfig& rc = trainer->config();
  std::shared_ptr<ProgressBar> bar;
  if (stderr_is_tty() && rank0) {
    bar = std::make_shared<ProgressBar>(train::is_language_model(rc.model.name));
    trainer->add_callback(bar);
  }
  if (!rc.log_path.empty()) {
    // Created fresh: a resumed run logs its own steps to the file it names.
    trainer->add_callback(std::make_shared<train::JsonlLogCallback>(rc.log_path));
  }
  std::shared_ptr<train::InspectCallback> inspector;
  if (look.inspect || look.detect_anomaly || look.profile || !f.profile_trace.empty()) {
    try {
      inspector = std::make_shared<train::InspectCallback>(*trainer, look);
    } catch (const inspect::InspectError& e) {
      throw UsageError(e.what());
    }
    try {
      trainer->add_callback(inspector);
    } catch (const train::ConfigError& e) {
      throw UsageError(e.what());
    }
  }
  train::TrainResult r;
  try {
    r = trainer->fit();
  } catch (...) {
    if (bar) bar->on_train_end();  // leave a clean line for the error message
    throw;
  }
  if (!rank0) return;
  if (f.json) {
    std::cout << train::result_to_json(r, 2) << "\n";
  } else {
    print_summary(r, rc, trainer->data().vocab_size());
  }
  // With --json the statistics and profile go to stderr, so that stdout stays one JSON object.
  if (inspector) (f.json ? std::cerr : std::cout) << inspector->summary();
  // The Trainer reports a run that did not train (docs/train.md "When a run did not train"); its
  // results are printed above, and the command fails: one error line, exit 1.
  if (!r.trained) throw std::runtime_error(r.not_trained);
}

RegisterCommand reg(30, [](CLI::App& app) {
  auto f = std::make_shared<Flags>();
  auto* sub =
      app.add_subcommand("train", "train a built-in model (mlp, cnn, gpt) in a given precision");
  f->sub = sub;
  train::TrainConfig& c = f->c;
  sub->add_option("--model", c.model.name,
                  "mlp | cnn | gpt | gpt2 | gpt2-medium | llama | llama-tiny | smollm-135m | "
                  "tinyllama-1.1b | llama2-7b (docs/llama.md)");
  sub->add_option(
      "--data", c.data,
      "fashion-mnist (default for mlp/cnn), synthetic, a folder of IDX files, or for gpt/gpt2 a "
      "text file or folder (default /usr/share/games/fortunes) or an llm.c .bin token file");
  sub->add_option("--precision", c.precision,
                  "precision recipe: " + join(train::recipe_names()) +
                      " (default fp32), optionally refined by a policy string, e.g. "
                      "'bf16:params=fp32,compute=bf16,output=fp32' (keys: " +
                      join(amp::policy_keys(), " ") + "; docs/amp-training.md)");
  sub->add_option("--epochs", c.epochs, "passes over the training data (default 1)");
  sub->add_option("--steps", c.steps,
                  "optimizer steps instead of epochs (whole run, resumed steps included)");
  sub->add_option("--batch", c.batch, "samples per micro-batch (default: mlp/cnn 128, gpt 16)");
  sub->add_option("--lr", c.lr, "learning rate (default: mlp/cnn 1e-3, gpt 3e-4)");
  sub->add_option("--optimizer", c.optimizer, "adamw | adam | sgd (default adamw)");
  sub->add_option("--weight-decay", f->weight_decay, "weight decay (default: the optimizer's)");
  sub->add_option("--momentum", c.momentum, "SGD momentum (default 0.9)");
  sub->add_option("--schedule", c.schedule,
                  "learning-rate schedule: constant | cosine | warmup_cosine | linear");
  sub->add_option("--warmup", c.warmup_steps, "linear warmup steps (default 0)");
  sub->add_option("--grad-accum", c.grad_accum, "micro-batches per optimizer step (default 1)");
  sub->add_option("--clip", c.clip, "clip gradients to this global L2 norm (default off)");
  sub->add_flag("--optimizer-in-backward,!--no-optimizer-in-backward", c.optimizer_in_backward,
                "update each parameter and free its gradient as soon as backward has finished "
                "it (PyTorch's optimizer in backward): the gradients never all exist at once, "
                "same results bit for bit; refused with --clip, --grad-accum > 1, loss scaling "
                "(fp16 recipes), data parallelism and --inspect (docs/amp.md)");
  sub->add_flag("--checkpointing,!--no-checkpointing", c.model.checkpointing,
                "gradient checkpointing (recompute activations; gpt); --no-checkpointing turns "
                "it off on --resume");
  sub->add_option("--layer-precision", c.layer_precision,
                  "per-layer precision: kind or name = fp32|bf16|fp16, e.g. "
                  "embed=fp32,attn=bf16,mlp=bf16,head=fp32 (kinds: embedding/embed, "
                  "attention/attn, mlp, block, linear, conv1d, conv2d, conv (both), layer_norm/ln, "
                  "batch_norm2d/bn, norm, head; names: fc1, blocks.0, ...; * = the rest of the model); "
                  "under fp8, fp8-current, mxfp8 also = fp8, e.g. head=bf16,*=fp8; for int4-qat, int2-qat, "
                  "ternary, binary, binary-act: layer = int8|int4|int2|ternary|binary|binary-act "
                  "with layer a name (conv1, fc1, head) or first/last, e.g. first=int4,fc1=binary");
  sub->add_option("--loss-scale-init", f->loss_scale_init,
                  "initial loss scale of dynamic loss scaling (fp16 recipes; default 65536)");
  sub->add_option("--growth-interval", f->growth_interval,
                  "steps without inf/NaN before the loss scale doubles (fp16 recipes; default "
                  "2000)");
  sub->add_option("--qat-freeze-bn-epoch", f->qat_freeze_bn_epoch,
                  "QAT recipes (int8-qat, int4-qat, ...): 0-based epoch from which batch norm "
                  "uses its running statistics "
                  "(default 1)");
  sub->add_option("--qat-disable-observer-epoch", f->qat_disable_observer_epoch,
                  "QAT recipes: 0-based epoch from which the activation observers are frozen "
                  "(default 1)");
  sub->add_option("--seed", c.seed, "seed of initialization and data order (default 0)");
  sub->add_option("--threads", c.threads, "CPU threads (default: all)");
  sub->add_option("--device", f->device, std::string(kDeviceHelp) + kGuardedDeviceHelp);
  sub->add_option("--width", c.model.width,
                  "model width (mlp: hidden size, cnn: conv1 channels, gpt: embedding)");
  sub->add_option("--layers", c.model.layers, "number of layers (mlp hidden layers, gpt blocks)");
  sub->add_option("--heads", c.model.heads, "attention heads (gpt, llama)");
  sub->add_option("--kv-heads", c.model.kv_heads,
                  "llama: k/v heads of grouped-query attention (must divide --heads)");
  sub->add_option("--context", c.model.context, "context length (gpt, default 128)");
  sub->add_option("--mlp-width", c.model.mlp_width,
                  "gpt: MLP width (default 1024); cnn: fc1 size (default 128)");
  sub->add_option("--train-limit", c.train_limit,
                  "use the first N training samples (gpt: N bytes of text)");
  sub->add_option("--test-limit", c.test_limit,
                  "evaluate on the first N test samples (gpt: N windows)");
  sub->add_flag_callback(
      "--no-eval", [f] { f->c.evaluate = false; }, "skip the evaluation at the end");
  sub->add_option("--save", c.save_dir, "write a checkpoint folder at the end (atomically)");
  sub->add_option("--save-every", c.save_every, "also save every N steps");
  sub->add_option(
      "--resume", c.resume_dir,
      "continue from a checkpoint: its configuration is used; the flags given override it, "
      "except those that must match it (model and shape, data set, precision, optimizer, batch, "
      "grad-accum, seed, loss-scale-init), which are refused when they differ (docs/train.md)");
  sub->add_option("--init-from", c.init_from,
                  "gpt2/gpt2-medium: start from GPT-2 weights (llm.c .bin, Hugging Face or mixp "
                  ".safetensors); llama: a Hugging Face directory (config.json + safetensors, "
                  "docs/llama.md)");
  sub->add_option("--lora", c.lora,
                  "fine-tune LoRA adapters only, base frozen (docs/lora.md): "
                  "r=16,alpha=32,dropout=0.05,targets=PATTERN[,PATTERN...] (glob on Linear names "
                  "or their suffixes: qkv, attn.*, blocks.0.mlp.fc)");
  sub->add_option("--lora-from", c.lora_from,
                  "start the adapters from a PEFT adapter folder (adapter_model.safetensors + "
                  "adapter_config.json, which sets r, alpha, dropout and targets)");
  sub->add_option("--lora-out", c.lora_out,
                  "write the trained adapters to this folder in PEFT's layout at the end");
  sub->add_option("--log", c.log_path, "write one JSON line per optimizer step to this file");
  sub->add_flag("--json", f->json, "print one JSON object on stdout");
  const char* dp = "Data parallelism (under mpirun; docs/distributed.md)";
  sub->add_option("--grad-comm", c.grad_comm,
                  "gradients on the wire: fp32 (default) | bf16 | fp16 (16 bits on the wire, "
                  "summed in fp32) | bf16-ring (naive ring, rounds at every hop)")
      ->group(dp);
  sub->add_option("--bucket-mb", c.bucket_mb, "MiB of gradients per reduction bucket (default 25)")
      ->group(dp);
  sub->add_flag_callback(
         "--no-comm-overlap", [f] { f->c.comm_overlap = false; },
         "reduce the gradients after backward instead of bucket by bucket during it (the same "
         "results; to measure what overlap buys)")
      ->group(dp);
  sub->add_option("--comm-timeout", c.comm_timeout,
                  "seconds a rank waits for the others before it stops with an error (default "
                  "60; 0 = forever)")
      ->group(dp);
  sub->add_option("--zero", c.zero,
                  "1: ZeRO stage 1, each rank keeps the optimizer state and master weights of "
                  "its share of the parameters; 2: ZeRO stage 2, and only the gradients of its "
                  "share; 3: ZeRO stage 3, and only its share of the parameters, each module's "
                  "gathered around its forward and backward (default 0)")
      ->group(dp);
  sub->add_option("--zero3-prefetch", c.zero3_prefetch,
                  "with --zero 3: 1 starts each module's parameter gather while the module "
                  "before it computes, on a communication thread (default); 0 gathers each "
                  "just before its use (the same results)")
      ->group(dp);
  sub->add_option("--check-replicas", c.check_replicas,
                  "compare every parameter's checksum across ranks every N steps (default 0 = "
                  "never)")
      ->group(dp);
  sub->add_option("--inspect", f->inspect,
                  "tensor statistics per module and role at chosen steps, as JSON Lines: "
                  "every=N,start=S,end=E,modules=P+Q,roles=activation+activation-grad+weight+"
                  "weight-grad+optimizer-state+fp8-operand,formats=fp16+bf16+fp8_e4m3+fp8_e5m2+mxfp8+int8,"
                  "out=inspect.jsonl,dump=DIR (all optional; docs/inspect.md)");
  sub->add_flag("--detect-anomaly", f->detect_anomaly,
                "stop at the first kernel that writes a NaN or inf and name its op, module, "
                "forward/backward and step (slower: every kernel output is scanned)");
  sub->add_flag("--profile", f->profile,
                "time, calls, FLOPs and bytes per op, dtype and phase; prints a table (casts "
                "included)");
  sub->add_option("--profile-trace", f->profile_trace,
                  "also write the profile as a Chrome trace JSON (chrome://tracing, Perfetto); "
                  "implies --profile");
  // Ranges of the numeric flags (flag_range.h; docs/cli.md "Numeric flags").
  shared_flag_ranges(*sub);
  real_range(sub->get_option("--weight-decay"), 0, 100);
  real_range(sub->get_option("--momentum"), 0, 1);
  int_range(sub->get_option("--warmup"), 0, 1'000'000'000);
  real_range(sub->get_option("--clip"), 0, 1e9, /*lo_open=*/true);
  real_range(sub->get_option("--loss-scale-init"), 0, 0x1.fffffep127, /*lo_open=*/true);  // a finite fp32 scale
  int_range(sub->get_option("--growth-interval"), 1, 1'000'000'000);
  int_range(sub->get_option("--qat-freeze-bn-epoch"), 0, 1'000'000);
  int_range(sub->get_option("--qat-disable-observer-epoch"), 0, 1'000'000);
  int_range(sub->get_option("--save-every"), 1, 1'000'000'000);
  real_range(sub->get_option("--bucket-mb"), 0, 1 << 20, /*lo_open=*/true);
  real_range(sub->get_option("--comm-timeout"), 0, 1e7);
  int_range(sub->get_option("--zero"), 0, 3);
  int_range(sub->get_option("--zero3-prefetch"), 0, 1);
  int_range(sub->get_option("--check-replicas"), 0, 1'000'000'000);
  sub->footer(
      "Examples:\n"
      "  mixp train --model mlp --epochs 2\n"
      "  mixp train --model cnn --steps 200 --batch 64 --log run.jsonl --json\n"
      "  mixp train --model gpt --steps 500 --save ckpt\n"
      "  mixp train --model mlp --epochs 3 --precision bf16\n"
      "  mixp train --model mlp --precision fp16 --loss-scale-init 1024 --log run.jsonl\n"
      "  mixp train --model gpt --precision bf16-pure --layer-precision embed=fp32,head=fp32\n"
      "  mixp train --model gpt --precision 'bf16:params=fp32,compute=bf16,output=fp32'\n"
      "  mixp train --model cnn --epochs 2 --precision int8-qat --save qat --json\n"
      "  mixp train --resume ckpt --steps 1000\n"
      "  mixp train --model mlp --steps 200 --device cuda   (untested on GPUs: docs/cuda.md)\n"
      "  mpirun -np 2 mixp train --model gpt --steps 300 --batch 8 --precision bf16 "
      "--grad-comm bf16\n"
      "  mixp train --model gpt2 --data tokens_train.bin --context 256 --batch 8 --precision bf16\n"
      "  mixp train --model gpt2 --init-from gpt2_124M.bin --data tokens_train.bin --context 64\n"
      "  mixp train --model gpt2 --data tokens_train.bin --context 256 --batch 8 --precision bf16 "
      "--checkpointing --optimizer-in-backward\n"
      "  mixp train --model gpt --steps 300 --inspect every=100,out=stats.jsonl\n"
      "  mixp train --model mlp --precision fp16 --detect-anomaly\n"
      "  mixp train --model gpt --steps 20 --precision bf16 --profile --profile-trace t.json\n");
  sub->callback([f] { run(*f); });
});

}  // namespace
}  // namespace mixp::cli
