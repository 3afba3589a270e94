// `mixp quantize`: post-training static int8 quantization of a checkpoint with N calibration
// batches (train/quantize_checkpoint.h). Printing only.
#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "checkpoint_warning.h"
#include "command.h"
#include "flag_range.h"
#include "mixp/train/checkpoint.h"
#include "mixp/train/quantize_checkpoint.h"

namespace mixp::cli {
namespace {

struct Flags {
  std::string checkpoint, out, data;
  int64_t calibrate = 0;
  bool json = false;
};

nlohmann::ordered_json num(const std::optional<double>& v) {
  return v && std::isfinite(*v) ? nlohmann::ordered_json(*v) : nlohmann::ordered_json();
}

void run(const Flags& f) {
  warn_if_unverified("quantize", f.checkpoint);
  train::QuantizeOptions o;
  o.calibrate = f.calibrate;
  o.out = f.out;
  o.data = f.data;
  train::QuantizeResult r;
  try {
    r = train::quantize_checkpoint(f.checkpoint, o);
  } catch (const train::ConfigError& e) {
    throw UsageError(e.what());
  }
  if (f.json) {
    nlohmann::ordered_json j;
    j["checkpoint"] = f.checkpoint;
    j["model"] = r.model;
    j["source_precision"] = r.source_precision;
    j["calibration_batches"] = r.calibration_batches;
    j["calibration_samples"] = r.calibration_samples;
    j["fp_accuracy"] = num(r.before.accuracy);
    j["fp_loss"] = num(r.before.loss);
    j["test_accuracy"] = num(r.after.accuracy);
    j["test_loss"] = num(r.after.loss);
    j["fp_eval_time_s"] = r.before.time_s;
    j["int8_eval_time_s"] = r.after.time_s;
    j["fp_weight_bytes"] = r.source_weight_bytes;
    j["int8_weight_bytes"] = r.int8_weight_bytes;
    j["calibrate_time_s"] = r.calibrate_time_s;
    if (!f.out.empty()) j["out"] = f.out;
    std::cout << j.dump(2) << "\n";
    return;
  }
  std::cout << fmt::format("{} ({}) calibrated on {} batches ({} samples) in {:.2f} s\n", r.model,
                           r.source_precision, r.calibration_batches, r.calibration_samples,
                           r.calibrate_time_s);
  std::cout << fmt::format("before: test accuracy {:.2f}%  ({:.2f} s)\n",
                           100 * r.before.accuracy.value_or(NAN), r.before.time_s);
  std::cout << fmt::format("int8:   test accuracy {:.2f}%  ({:.2f} s), weights {} -> {} bytes\n",
                           100 * r.after.accuracy.value_or(NAN), r.after.time_s,
                           r.source_weight_bytes, r.int8_weight_bytes);
  if (!f.out.empty()) std::cout << "saved:  " << f.out << "\n";
}

RegisterCommand reg(32, [](CLI::App& app) {
  auto f = std::make_shared<Flags>();
  auto* sub = app.add_subcommand(
      "quantize", "post-training int8 quantization of a checkpoint (calibrate, convert, evaluate)");
  sub->add_option("--checkpoint", f->checkpoint, "checkpoint folder (fp32) written by mixp train")
      ->required();
  sub->add_option("--calibrate", f->calibrate,
                  "training batches run through the observers before converting")
      ->required();
  sub->add_option("--out", f->out,
                  "write an int8 checkpoint folder here (int8_model.safetensors + state.json)");
  sub->add_option("--data", f->data, "calibrate and evaluate on this data instead");
  // Ranges of the numeric flags (flag_range.h; docs/cli.md "Numeric flags").
  int_range(sub->get_option("--calibrate"), 1, 1'000'000'000);
  sub->add_flag("--json", f->json, "print one JSON object on stdout");
  sub->footer(
      "Examples:\n"
      "  mixp quantize --checkpoint ckpt --calibrate 32 --out ckpt-int8\n"
      "  mixp eval --checkpoint ckpt-int8\n");
  sub->callback([f] { run(*f); });
});

}  // namespace
}  // namespace mixp::cli
