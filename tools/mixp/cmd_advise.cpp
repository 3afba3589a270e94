// `mixp advise`: which format each Linear layer fits, a --layer-precision proposal and its
// verification against fp32 and bf16 (docs/inspect.md "The advisor"). Parses flags into
// study::AdviseOptions, prints study::advise_text (or advise_json with --json). Printing only.
#include <iostream>
#include <memory>
#include <string>

#include "command.h"
#include "flag_range.h"
#include "mixp/inspect/inspect_spec.h"
#include "mixp/study/advise.h"
#include "omp_wait.h"

namespace mixp::cli {
namespace {

struct Flags {
  study::AdviseOptions o;
  bool json = false;
};

void run(Flags& f) {
  ensure_passive_omp_wait();
  study::AdviseOptions& o = f.o;
  try {
    train::TrainConfig probe = o.base;
    probe.precision = "fp32";
    (void)probe.resolved();
  } catch (const train::ConfigError& e) {
    throw UsageError(e.what());
  }
  if (!f.json) o.progress = [](const std::string& line) { std::cerr << line << "\n"; };
  study::AdviseResult r;
  try {
    r = study::run_advise(o);
  } catch (const train::ConfigError& e) {
    throw UsageError(e.what());
  } catch (const inspect::InspectError& e) {
    throw UsageError(e.what());
  }
  if (f.json) {
    std::cout << study::advise_json(r) << "\n";
  } else {
    std::cout << "\n" << study::advise_text(r);
  }
}

RegisterCommand reg(36, [](CLI::App& app) {
  auto f = std::make_shared<Flags>();
  auto* sub = app.add_subcommand(
      "advise",
      "which format each Linear layer fits (from the tensor statistics of a short fp32 run), a "
      "--layer-precision proposal, and its check by short training runs against fp32 and bf16");
  train::TrainConfig& c = f->o.base;
  c.model.name = "mlp";
  sub->add_option("--model", c.model.name, "mlp | cnn | gpt | gpt2 | gpt2-medium | llama (and its presets, docs/llama.md) (default mlp)");
  sub->add_option("--data", c.data,
                  "fashion-mnist (default for mlp/cnn), synthetic, a folder of IDX files, or for "
                  "gpt a text file or folder");
  sub->add_option("--width", c.model.width,
                  "model width (mlp: hidden size, cnn: conv1 channels, gpt: embedding)");
  sub->add_option("--layers", c.model.layers, "number of layers (mlp hidden layers, gpt blocks)");
  sub->add_option("--heads", c.model.heads, "attention heads (gpt)");
  sub->add_option("--context", c.model.context, "context length (gpt, default 128)");
  sub->add_option("--batch", c.batch, "samples per batch (default: mlp/cnn 128, gpt 16)");
  sub->add_option("--lr", c.lr, "learning rate (default: mlp/cnn 1e-3, gpt 3e-4)");
  sub->add_option("--threads", c.threads, "CPU threads (default: all)");
  sub->add_option("--seed", c.seed, "seed of initialisation and data order (default 0)");
  sub->add_option("--train-limit", c.train_limit,
                  "use the first N training samples (gpt: N tokens)");
  sub->add_option("--test-limit", c.test_limit,
                  "evaluate on the first N test samples (gpt: N windows)");
  sub->add_option("--reference", f->o.reference,
                  "precision of the statistics run: fp32 or bf16")
      ->capture_default_str();
  sub->add_option("--stats-steps", f->o.stats_steps, "steps of the statistics run")
      ->capture_default_str();
  sub->add_option("--inspect-every", f->o.inspect_every,
                  "inspect every N-th step of the statistics run")
      ->capture_default_str();
  sub->add_option("--stats", f->o.stats_file,
                  "take the statistics from this `mixp train --inspect` JSON Lines file instead "
                  "of a run (it needs the roles activation, activation-grad and weight, and the "
                  "formats bf16, fp16 and mxfp8)");
  sub->add_option("--steps", f->o.verify_steps, "steps of each verification run")
      ->capture_default_str();
  sub->add_option("--max-accuracy-drop", f->o.max_accuracy_drop,
                  "tolerance for classifiers: test accuracy points below fp32")
      ->capture_default_str();
  sub->add_option("--max-loss-rise", f->o.max_loss_rise,
                  "tolerance for gpt: validation loss above fp32, relative (0.01 = 1%)")
      ->capture_default_str();
  sub->add_option("--min-gain", f->o.min_gain,
                  "how much faster (0.05 = 5%) the fp8 policy or bf16 with fp32 layers must be "
                  "than plain bf16 to be proposed instead of it (one timed run each)")
      ->capture_default_str();
  sub->add_option("--timing-rounds", f->o.timing_rounds,
                  "interleaved rounds that time every run after the verification runs (0: use "
                  "the runs' own step times)")
      ->capture_default_str();
  sub->add_option("--timing-steps", f->o.timing_steps,
                  "steps per run and timing round (default: a tenth of --steps, at least 10)");
  // Ranges of the numeric flags (flag_range.h; docs/cli.md "Numeric flags").
  shared_flag_ranges(*sub);
  int_range(sub->get_option("--stats-steps"), 1, 1'000'000'000);
  int_range(sub->get_option("--inspect-every"), 1, 1'000'000'000);
  real_range(sub->get_option("--max-accuracy-drop"), 0, 100);
  real_range(sub->get_option("--max-loss-rise"), 0, 100);
  real_range(sub->get_option("--min-gain"), 0, 100);
  int_range(sub->get_option("--timing-rounds"), 0, 1000);
  int_range(sub->get_option("--timing-steps"), 1, 1'000'000'000);
  sub->add_flag("--json", f->json, "print one JSON object on stdout (no progress)");
  sub->footer(
      "How it decides (per Linear layer, the first rule that fires): NaN/inf or bf16 overflow "
      "or bf16 error -> fp32; the output layer -> bf16; mxfp8 underflow > 1% or relative MSE > "
      "5e-3, or an output gradient spanning more than 31 binades -> bf16; else fp8. Then every "
      "candidate is trained against fp32 and bf16, and the fastest one within the tolerance is "
      "proposed: the cost is measured on this machine (docs/inspect.md, \"The advisor\").\n\n"
      "Examples:\n"
      "  mixp advise --model mlp --steps 300\n"
      "  mixp advise --model gpt --steps 200 --json\n"
      "  mixp train --model gpt --steps 20 --inspect every=5,out=s.jsonl && mixp advise --model "
      "gpt --stats s.jsonl\n");
  sub->callback([f] { run(*f); });
});

}  // namespace
}  // namespace mixp::cli
