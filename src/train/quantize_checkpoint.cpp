// Post-training static quantization of a checkpoint; see include/mixp/train/quantize_checkpoint.h.
#include "mixp/train/quantize_checkpoint.h"

#include <fmt/format.h>

#include <chrono>

#include "mixp/autograd/grad_mode.h"
#include "mixp/backend/backend.h"
#include "mixp/io/atomic_file.h"
#include "mixp/io/manifest.h"
#include "mixp/quant/int8_model.h"
#include "mixp/quant/qat.h"
#include "mixp/train/checkpoint.h"
#include "mixp/train/recipe_registry.h"
#include "trainer_impl.h"

namespace mixp::train {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

QuantizeResult quantize_checkpoint(const std::filesystem::path& dir, const QuantizeOptions& opt) {
  if (opt.calibrate < 0) {
    throw ConfigError(fmt::format("--calibrate must be >= 0, got {}", opt.calibrate));
  }
  const CheckpointFiles ck = read_checkpoint(dir);
  TrainConfig c = ck.config;
  if (is_recipe_family(c.precision, RecipeFamily::int8_qat)) {
    throw ConfigError(fmt::format(
        "checkpoint {} was trained with int8-qat: it holds its int8 model already; `mixp eval "
        "--checkpoint {}` runs it",
        dir.string(), dir.string()));
  }
  if (is_recipe_family(c.precision, RecipeFamily::lowbit_qat)) {
    throw ConfigError(fmt::format(
        "checkpoint {} was trained with {}: it holds its packed low-bit model already; `mixp "
        "eval --checkpoint {}` runs it",
        dir.string(), c.precision, dir.string()));
  }
  if (is_language_model(c.model.name)) {
    throw ConfigError("mixp quantize supports the mlp and cnn models, not " + c.model.name);
  }
  if (!opt.data.empty()) c.data = opt.data;
  RunParts parts = build_run(c, RunPurpose::calibrate);
  c = parts.config;
  const auto& recipe = parts.recipe;
  auto& source = parts.data;
  auto& model = parts.model;
  const auto file = dir / kModelFile;
  const SafeTensorsFile weights = ck.safetensors(kModelFile);
  // The calibration recipe has no per-layer rules: with them it is not the recorded one.
  check_checkpoint_weights(ck, weights, c.layer_precision.empty() ? model.get() : nullptr);
  load_module_state(*model, weights, file.string());

  QuantizeResult r;
  r.model = c.model.name;
  r.source_precision = c.precision;
  for (const auto& [n, t] : model->named_parameters()) r.source_weight_bytes += int64_t(t.nbytes());
  if (opt.evaluate_fp) {
    const auto t0 = std::chrono::steady_clock::now();
    r.before = detail::evaluate_model(*model, *source, *recipe, false);
    r.before.time_s = seconds_since(t0);
    r.before.evaluated = c.precision;
  }
  try {
    quant::prepare_ptq(*model, quant::default_ptq_qconfig());
  } catch (const std::invalid_argument& e) {
    throw ConfigError(e.what());
  }
  {
    NoGradGuard ng;
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < opt.calibrate; ++i) {
      const Batch b = source->next();
      model->forward(b.input);
      r.calibration_samples += b.samples;
    }
    r.calibrate_time_s = seconds_since(t0);
  }
  r.calibration_batches = opt.calibrate;
  std::shared_ptr<quant::Int8Model> q;
  try {
    q = quant::convert_to_int8(*model);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(e.what());
  }
  r.int8_weight_bytes = q->weight_bytes();
  const auto t0 = std::chrono::steady_clock::now();
  r.after = detail::evaluate_model(*q, *source, *recipe, false);
  r.after.time_s = seconds_since(t0);
  r.after.evaluated = "int8";
  if (!opt.out.empty()) {
    nlohmann::ordered_json state = nlohmann::ordered_json::parse(ck.state_text);
    state["int8"] = {{"method", "ptq"},
                     {"calibration_batches", opt.calibrate},
                     {"source", dir.string()},
                     {"test_accuracy", r.after.accuracy.value_or(0.0)}};
    const std::string text = state.dump(2) + "\n";
    write_directory_atomic(opt.out, [&](const std::filesystem::path& staging) {
      quant::save_int8_model(*q, staging / kInt8ModelFile);
      write_text_atomic(staging / kStateFile, text);
      write_folder_manifest(staging);
    });
  }
  return r;
}

}  // namespace mixp::train
