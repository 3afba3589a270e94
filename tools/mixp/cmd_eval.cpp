// `mixp eval`: evaluates a checkpoint written by `mixp train --save` on its test set (validation
// split for gpt), optionally in another precision. Printing only.
#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "command.h"
#include "mixp/train/checkpoint.h"
#include "mixp/train/trainer.h"

namespace mixp::cli {
namespace {

struct Flags {
  std::string checkpoint, precision, data;
  bool json = false;
};

void run(const Flags& f) {
  const train::TrainConfig c = train::read_checkpoint_config(f.checkpoint);
  const nlohmann::json state = nlohmann::json::parse(train::read_checkpoint_state(f.checkpoint));
  train::EvalResult r;
  try {
    r = train::evaluate_checkpoint(f.checkpoint, f.precision, f.data);
  } catch (const train::ConfigError& e) {
    throw UsageError(e.what());
  }
  const bool lm = train::is_language_model(c.model.name);
  const std::string precision = f.precision.empty() ? c.precision : f.precision;
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
    std::cout << j.dump(2) << "\n";
    return;
  }
  std::cout << fmt::format("{} at step {}, evaluated in {} on {} {}\n", c.model.name,
                           state.value("step", int64_t(0)), precision, r.samples,
                           lm ? "validation windows" : "test images");
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
  sub->add_option("--checkpoint", f->checkpoint, "checkpoint folder written by `mixp train --save`")
      ->required();
  sub->add_option("--precision", f->precision,
                  "evaluate in this precision recipe (default: the checkpoint's)");
  sub->add_option("--data", f->data, "evaluate on this data instead of the checkpoint's");
  sub->add_flag("--json", f->json, "print one JSON object on stdout");
  sub->footer(
      "Examples:\n"
      "  mixp eval --checkpoint ckpt\n"
      "  mixp eval --checkpoint ckpt --precision fp64 --json\n");
  sub->callback([f] { run(*f); });
});

}  // namespace
}  // namespace mixp::cli
