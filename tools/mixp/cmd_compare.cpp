// `mixp compare`: the precision study (docs/architecture.md 4.2). Parses flags into a StudyConfig,
// runs mixp::study::run_study with a progress display, prints the summary table (or results.json
// with --json) and where the report is. Printing only.
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "flag_range.h"
#include "device_flag.h"
#include "compare_progress.h"
#include "mixp/data/token_file.h"
#include "mixp/data/tokenizer.h"
#include "mixp/dist/process_group.h"
#include "mixp/nn/llama_presets.h"
#include "mixp/nn/models.h"
#include "mixp/study/report.h"
#include "mixp/study/study_runner.h"
#include "mixp/train/recipe_registry.h"
#include "omp_wait.h"

namespace mixp::cli {
namespace {

// The default study: the mlp on Fashion-MNIST for one epoch, every available recipe of the
// seeds' list. Chosen to finish within 5 minutes on a 2-core machine (docs/study.md).
constexpr int64_t kDefaultEpochs = 1;

std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

// "fp32,bf16,fp16" -> names. A policy string keeps its own commas: a piece with '=' and no ':'
// continues the previous one ("fp32,bf16:params=fp32,compute=bf16" -> fp32 and the policy).
std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s + ",") {
    if (c == ',') {
      while (!cur.empty() && cur.back() == ' ') cur.pop_back();
      size_t i = 0;
      while (i < cur.size() && cur[i] == ' ') ++i;
      std::string piece = cur.substr(i);
      const bool continues = !out.empty() && piece.find('=') != std::string::npos &&
                             piece.find(':') == std::string::npos &&
                             out.back().find(':') != std::string::npos;
      if (continues) {
        out.back() += "," + piece;
      } else if (!piece.empty()) {
        out.push_back(piece);
      }
      cur.clear();
    } else {
      cur += c;
    }
  }
  return out;
}

// `--precisions all`: every recipe of the registry that can train `model`, except `auto` (it
// resolves to one of them).
std::vector<std::string> all_precisions(std::string_view model) {
  return train::recipe_names({.model = model, .with_auto = false});
}

struct Flags {
  study::StudyConfig sc;
  std::string precisions;
  std::string out = "mixp-study";
  int64_t epochs = 0, steps = 0;
  bool json = false;
  std::string device = "cpu";
  std::string tokenizer;  // llama: a SentencePiece model for a text --data
  CLI::App* sub = nullptr;
  bool given(const char* name) const { return sub->count(name) > 0; }
};

// A temporary token file, removed when the study is done.
struct TempTokens {
  std::filesystem::path path;
  ~TempTokens() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove(path, ec);
  }
};

// llama: a text --data becomes tokens of the checkpoint's own tokenizer (--tokenizer, or
// tokenizer.model in the --init-from directory) once, before the runs, so that every precision
// reads the same ids; a llama checkpoint given text without a tokenizer would read characters as
// its token ids. Returns false when there is nothing to tokenize.
bool tokenize_study_text(Flags& f, TempTokens& tmp) {
  train::TrainConfig& c = f.sc.base;
  std::error_code ec;
  if (!nn::is_llama_model(c.model.name) || c.data.empty() || c.data == "synthetic" ||
      data::is_token_file(c.data) || std::filesystem::path(c.data).extension() == ".bin") {
    if (!f.tokenizer.empty())
      throw UsageError("--tokenizer applies to a llama study on a text --data; " +
                       (c.data.empty() ? std::string("no --data given") : c.data + " is not text"));
    return false;
  }
  std::filesystem::path model = f.tokenizer;
  if (model.empty() && !c.init_from.empty() &&
      std::filesystem::exists(std::filesystem::path(c.init_from) / "tokenizer.model", ec))
    model = std::filesystem::path(c.init_from) / "tokenizer.model";
  if (model.empty()) {
    if (c.init_from.empty()) return false;  // from scratch: characters are the vocabulary
    throw UsageError(fmt::format(
        "--data {} is text and {} has no tokenizer.model: give --tokenizer (a SentencePiece "
        "model), or tokens from `mixp tokenize {} --tokenizer DIR -o tokens.bin`",
        c.data, c.init_from, c.data));
  }
  const data::Tokenizer tok = data::Tokenizer::load(model);
  tmp.path = std::filesystem::temp_directory_path() /
             fmt::format("mixp-compare-{}-tokens.bin", ::getpid());
  const data::TokenizeResult r = data::tokenize_corpus(tok, c.data, tmp.path);
  std::cerr << fmt::format("tokenized {} with {}: {} tokens (vocabulary {})\n", c.data,
                           tok.source(), r.tokens, r.vocab);
  c.data = tmp.path.string();
  return true;
}

void run(Flags& f) {
  ensure_passive_omp_wait();
  // Every run of the study (model, optimizer state, batches) is made on this device; on a GPU
  // the energy is its board's (NVML), docs/cuda.md.
  const DefaultDeviceGuard on_device(parse_device_flag(f.device));
  study::StudyConfig& sc = f.sc;
  train::TrainConfig& c = sc.base;
  if (f.given("--epochs") && f.given("--steps")) {
    throw UsageError("--epochs and --steps both given; give one");
  }
  auto positive = [&](const char* flag, double v) {
    if (f.given(flag) && !(v > 0))
      throw UsageError(fmt::format("{} must be positive, got {:g}", flag, v));
  };
  positive("--epochs", double(f.epochs));
  positive("--steps", double(f.steps));
  positive("--batch", double(c.batch));
  positive("--context", double(c.model.context));
  positive("--lr", c.lr);
  positive("--threads", double(c.threads));
  positive("--seeds", double(sc.seeds));
  positive("--train-limit", double(c.train_limit));
  positive("--test-limit", double(c.test_limit));
  c.steps = f.steps;
  c.epochs = f.given("--steps") ? 0 : (f.given("--epochs") ? f.epochs : kDefaultEpochs);

  if (f.given("--precisions")) {
    sc.precisions =
        f.precisions == "all" ? all_precisions(c.model.name) : split_list(f.precisions);
  } else {
    sc.precisions = study::default_study_precisions(c.model.name);
  }
  sc.out_dir = f.out;
  // Under mpirun (data-parallel runs) rank 0 alone reports and writes (study_runner.cpp).
  const bool rank0 = dist::world().rank() == 0;
  // Every check that does not need a run happens here, before the first run starts.
  try {
    study::check_precisions(sc.precisions, c.model.name);
    if (rank0) study::check_output_dir(sc.out_dir, sc.force);
    // Every precision's configuration (qlora-* needs --lora, a LoRA spec must parse).
    for (const std::string& p : sc.precisions) {
      train::TrainConfig probe = c;
      probe.precision = p;
      (void)probe.resolved();
    }
  } catch (const train::ConfigError& e) {
    throw UsageError(e.what());
  } catch (const study::StudyError& e) {
    throw UsageError(e.what());
  }

  TempTokens tokens;
  tokenize_study_text(f, tokens);

  const bool live = stderr_is_tty() && rank0;
  CompareProgress progress(live);
  if (!f.json && rank0) {
    std::cerr << fmt::format("comparing {} on {}: {} ({} run{})\n", c.model.name,
                             c.data.empty() ? "its default data" : c.data, join(sc.precisions),
                             sc.precisions.size() * size_t(sc.seeds),
                             sc.precisions.size() * size_t(sc.seeds) == 1 ? "" : "s");
  }
  study::StudyOutcome o;
  try {
    o = study::run_study(sc, [&](const study::StudyEvent& e) {
      if (rank0) progress(e);
    });
  } catch (const train::ConfigError& e) {
    throw UsageError(e.what());
  }
  if (!rank0) return;
  const std::string report = (sc.out_dir / "report.html").string();
  if (!o.any_finished) {
    throw std::runtime_error(
        "no run finished (every run diverged or failed); the report says "
        "why: " +
        report);
  }
  if (f.json) {
    std::cout << study::render_results_json(o.results);
  } else {
    std::cout << "\n" << study::format_study_table(o.results);
    std::cout << "\nreport: " << report << "\n";
  }
}

RegisterCommand reg(40, [](CLI::App& app) {
  auto f = std::make_shared<Flags>();
  auto* sub = app.add_subcommand(
      "compare",
      "the precision study: train one model in several precisions on identical data and "
      "initialisation, and report accuracy, time, memory and energy");
  f->sub = sub;
  train::TrainConfig& c = f->sc.base;
  c.model.name = "mlp";
  sub->add_option("--model", c.model.name, "mlp | cnn | gpt | gpt2 | gpt2-medium | llama (and its presets, docs/llama.md) (default mlp)");
  sub->add_option("--precisions", f->precisions,
                  "comma-separated recipes, or 'all' (default: " +
                      join(train::recipe_names({.study_default = true}), ",") +
                      ", without those the model cannot train; available: " +
                      join(train::recipe_names()) + ")");
  sub->add_option("--epochs", f->epochs, "passes over the training data per run (default 1)");
  sub->add_option("--steps", f->steps, "optimizer steps per run instead of epochs");
  sub->add_option("--seeds", f->sc.seeds,
                  "runs per precision with seeds --seed, --seed+1, ...; the report shows mean "
                  "and spread (default 1)");
  sub->add_option("--out", f->out,
                  "folder for results.json, results.csv, report.md, report.html "
                  "(default mixp-study)");
  sub->add_flag("--force", f->sc.force,
                "write into --out even if it exists and is not a previous study");
  sub->add_option("--data", c.data,
                  "fashion-mnist (default for mlp/cnn), synthetic, a folder of IDX files, or for "
                  "gpt a text file or folder");
  sub->add_option("--init-from", c.init_from,
                  "every run starts from these weights: gpt2 (GPT-2 .bin/.safetensors) or llama "
                  "(a Hugging Face directory, docs/llama.md): a fine-tuning study");
  sub->add_option("--lora", c.lora,
                  "every run fine-tunes LoRA adapters, base frozen (as mixp train --lora, "
                  "docs/lora.md): r=16,alpha=32,targets=q_proj,v_proj; needed by qlora-nf4/"
                  "qlora-int4; the report adds each run's trainable parameters");
  sub->add_option("--tokenizer", f->tokenizer,
                  "llama with a text --data: the SentencePiece tokenizer.model (or its folder) "
                  "that turns it into tokens once for all runs (default: --init-from's "
                  "tokenizer.model)");
  sub->add_option("--batch", c.batch, "samples per batch (default: mlp/cnn 128, gpt 16)");
  sub->add_option("--context", c.model.context,
                  "gpt/gpt2: tokens per sequence (default: gpt 128, gpt2 1024); a short context "
                  "keeps a gpt2 study to minutes");
  sub->add_flag("--checkpointing", c.model.checkpointing,
                "gpt/gpt2: gradient checkpointing in every run (recompute each block)");
  sub->add_option("--lr", c.lr, "learning rate (default: mlp/cnn 1e-3, gpt 3e-4)");
  sub->add_option("--optimizer", c.optimizer, "adamw | adam | sgd (default adamw)");
  sub->add_option("--threads", c.threads, "CPU threads (default: all)");
  sub->add_option("--grad-comm", c.grad_comm,
                  "under mpirun: gradients on the wire, fp32 (default) | bf16 | fp16 | bf16-ring "
                  "(docs/distributed.md)");
  sub->add_option("--seed", c.seed, "first seed of initialisation and data order (default 0)");
  sub->add_option("--train-limit", c.train_limit,
                  "use the first N training samples (gpt: N bytes of text)");
  sub->add_option("--test-limit", c.test_limit,
                  "evaluate on the first N test samples (gpt: N windows)");
  sub->add_option("--inspect", f->sc.inspect,
                  "inspect and profile every run (mixp train --inspect SPEC, e.g. every=10; its "
                  "out= and dump= are ignored): the report adds per precision a heatmap (module x "
                  "step) of the overflow and underflow fractions in the run's own format, and the "
                  "profiler's top ops (docs/inspect.md)");
  sub->add_option("--device", f->device,
                  std::string(kDeviceHelp) + "; every precision trains on it, energy from NVML");
  // Ranges of the numeric flags (flag_range.h; docs/cli.md "Numeric flags").
  shared_flag_ranges(*sub);
  int_range(sub->get_option("--seeds"), 1, 1000);
  sub->add_flag("--json", f->json, "print results.json's object on stdout");
  sub->footer(
      "Every run of one seed starts from the same weights and sees the same batches; only the "
      "precision differs.\n"
      "A run that diverges (NaN) is reported as diverged; the study goes on.\n"
      "Energy is measured with Linux RAPL where readable, else estimated from counted operations "
      "(labelled \"estimate\"); with --device cuda, the GPU board's counter from NVML (labelled "
      "\"nvml\", measured).\n"
      "OMP_WAIT_POLICY defaults to passive for this command (spinning OpenMP threads distort "
      "timings on a busy machine); set it to override.\n\n"
      "Examples:\n"
      "  mixp compare                                  # the default study (mlp, 1 epoch)\n"
      "  mixp compare --precisions fp32,bf16,fp16 --epochs 2 --seeds 3\n"
      "  mixp compare --model cnn --steps 200 --out cnn-study --json\n"
      "  mixp compare --precisions fp32,bf16,fp16,fp8 --steps 200 --inspect every=50\n"
      "  mixp compare --model gpt2 --steps 20 --batch 4 --context 64 --precisions fp32,bf16,"
      "bf16-pure,fp8\n"
      "  mixp compare --device cuda --precisions fp32,tf32,bf16,fp8 --steps 200   # on a GPU\n"
      "  mixp compare --model llama --init-from SmolLM-135M/ --data tokens.bin --precisions "
      "bf16,fp8,qlora-nf4 \\\n"
      "      --lora r=16,alpha=32,targets=q_proj,k_proj,v_proj,o_proj --steps 50 --batch 4 "
      "--context 256   # fine-tuning recipes (docs/llama.md)\n");
  sub->callback([f] { run(*f); });
});

}  // namespace
}  // namespace mixp::cli
