// `mixp eval`: evaluates a checkpoint written by `mixp train --save` (or `mixp quantize --out`) on
// its test set (validation split for gpt), optionally in another precision, with weight-only
// 4-bit Linear weights, or as its int8 model. Printing only.
#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "checkpoint_warning.h"
#include "command.h"
#include "mixp/train/checkpoint.h"
#include "mixp/train/trainer.h"

namespace mixp::cli {
namespace {

struct Flags {
  std::string checkpoint;
  train::EvalOptions opt;
  bool json = false;
};

void run(const Flags& f) {
  warn_if_unverified("eval", f.checkpoint);
  const train::TrainConfig c = train::read_checkpoint_config(f.checkpoint);
  const nlohmann::json state = nlohmann::json::parse(train::read_checkpoint_state(f.checkpoint));
  train::EvalResult r;
  try {
    r = train::evaluate_checkpoint(f.checkpoint, f.opt);
  } catch (const train::ConfigError& e) {
    throw UsageError(e.what());
  }
  const bool lm = train::is_language_model(c.model.name);
  std::string precision = f.opt.precision.empty() ? c.precision : f.opt.precision;
  if (r.evaluated.rfind("int8", 0) == 0) precision = "int8";
  auto num = [](double v) {
    return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json();
  };
  if (f.json) {
    nlohmann::ordered_json j;
    j["checkpoint"] = f.checkpoint;
    j["model"] = c.model.name;
    j["precision"] = precision;
    j["trained_precision"] = c.precision;
    j["step"] = state.value("step", int64_t(0));
    if (lm) {
      j["val_loss"] = num(r.loss);
    } else {
      j["test_accuracy"] = num(r.accuracy.value_or(NAN));
      j["test_loss"] = num(r.loss);
    }
    j["samples"] = r.samples;
    j["evaluated"] = r.evaluated;
    if (!f.opt.weights.empty()) {
      j["weights"] = f.opt.weights;
      j["compute"] = f.opt.compute;
    }
    j["weight_bytes"] = r.weight_bytes;
    j["eval_time_s"] = r.time_s;
    std::cout << j.dump(2) << "\n";
    return;
  }
  std::cout << fmt::format("{} at step {}, evaluated as {} on {} {} in {:.2f} s\n", c.model.name,
                           state.value("step", int64_t(0)), r.evaluated, r.samples,
                           lm ? "validation windows" : "test images", r.time_s);
  if (lm) {
    std::cout << fmt::format("validation loss {:.4f}\n", r.loss);
  } else {
    std::cout << fmt::format("test accuracy {:.2f}%   test loss {:.4f}\n",
                             100 * r.accuracy.value_or(NAN), r.loss);
  }
}

RegisterCommand reg(31, [](CLI::App& app) {
  auto f = std::make_shared<Flags>();
  auto* sub =
      app.add_subcommand("eval", "evaluate a checkpoint on its test set (gpt: validation loss)");
  sub->add_option("--checkpoint", f->checkpoint,
                  "checkpoint folder written by `mixp train --save` or `mixp quantize --out`")
      ->required();
  sub->add_option("--precision", f->opt.precision,
                  "evaluate in this precision recipe (default: the checkpoint's; its int8 or packed "
                  "model when it has one); int8: the checkpoint's int8 model; packed: the "
                  "packed model of a low-bit run (int4-qat, int2-qat, ternary, binary, "
                  "binary-act)");
  sub->add_option("--weights", f->opt.weights,
                  "nf4 | int4: weight-only 4-bit Linear weights (blocks of 64, absmax scale)");
  sub->add_option("--compute", f->opt.compute,
                  "with --weights: bf16 (default) or fp32 GEMMs on the dequantized weights");
  sub->add_flag("--double-quant", f->opt.double_quant,
                "with --weights: also quantize the block scales (int8, blocks of 256)");
  sub->add_option("--data", f->opt.data, "evaluate on this data instead of the checkpoint's");
  sub->add_flag("--json", f->json, "print one JSON object on stdout");
  sub->footer(
      "Examples:\n"
      "  mixp eval --checkpoint ckpt\n"
      "  mixp eval --checkpoint ckpt --precision fp64 --json\n"
      "  mixp eval --checkpoint qat                 # int8 model of an int8-qat run\n"
      "  mixp eval --checkpoint bin --json          # packed model of a binary-act run\n"
      "  mixp eval --checkpoint ckpt --weights nf4 --compute bf16\n");
  sub->callback([f] { run(*f); });
});

}  // namespace
}  // namespace mixp::cli
