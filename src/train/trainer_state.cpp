// Checkpoint writing and resuming for the Trainer (format: include/mixp/train/checkpoint.h).
#include <fmt/format.h>

#include "mixp/io/atomic_file.h"
#include "mixp/io/safetensors.h"
#include "mixp/train/checkpoint.h"
#include "trainer_impl.h"

namespace mixp::train {

void Trainer::Impl::save(const std::filesystem::path& dir) const {
  nlohmann::ordered_json state;
  state["format"] = kCheckpointFormat;
  state["version"] = kCheckpointVersion;
  state["step"] = step;
  state["epoch"] = source->epoch();
  state["epoch_position"] = source->position();
  state["skipped_steps"] = skipped;
  state["last_loss"] = std::isfinite(last_loss) ? nlohmann::ordered_json(last_loss) : nullptr;
  state["config"] = nlohmann::ordered_json::parse(config_to_json(cfg));
  state["data"] = source->state();
  // Every random stream of a run is a pure function of these seeds and counters: model
  // initialization (model seed), data order (sampler seed, epoch, position, or gpt's micro-batch
  // counter, under "data"), and the mask streams of Dropout modules, if the model has any.
  state["rng"] = {{"seed", cfg.seed},
                  {"model_seed", cfg.model.seed},
                  {"dropout", detail::dropout_streams(*model)}};
  SafeTensorsFile opt_tensors;
  nlohmann::json opt_scalars = nlohmann::json::object();
  detail::save_optimizer_state(*opt, opt_tensors, opt_scalars);
  state["optimizer"] = {{"name", cfg.optimizer}, {"lr", opt->lr()}, {"state", opt_scalars}};
  nlohmann::ordered_json rs = nlohmann::ordered_json::object();
  for (const auto& [k, v] : recipe->state()) rs[k] = v;
  state["recipe"] = {{"name", recipe->name()}, {"loss_scale", recipe->loss_scale()}, {"state", rs}};
  state["metrics"] = metrics;

  SafeTensorsFile weights = module_state(*model);
  weights.metadata["format"] = kCheckpointFormat;
  weights.metadata["model"] = cfg.model.name;
  opt_tensors.metadata["format"] = kCheckpointFormat;
  opt_tensors.metadata["optimizer"] = cfg.optimizer;
  const std::string text = state.dump(2) + "\n";
  write_directory_atomic(dir, [&](const std::filesystem::path& staging) {
    write_safetensors(staging / kModelFile, weights);
    write_safetensors(staging / kOptimizerFile, opt_tensors);
    recipe->save_extra(*model, staging);
    write_text_atomic(staging / kStateFile, text);
  });
}

void Trainer::Impl::resume(const std::filesystem::path& dir) {
  const nlohmann::json state = nlohmann::json::parse(read_checkpoint_state(dir));
  const TrainConfig saved = config_from_json(state.at("config").dump());
  if (saved.model.name != cfg.model.name) {
    throw TrainError(
        fmt::format("checkpoint {} holds a '{}' model, this run trains '{}'; resume "
                    "with --model {}",
                    dir.string(), saved.model.name, cfg.model.name, saved.model.name));
  }
  if (saved.precision != cfg.precision) {
    // The optimizer state and any loss-scale state belong to the saved recipe.
    throw TrainError(
        fmt::format("checkpoint {} was trained in precision {}, this run asks for {}; "
                    "resume with --precision {}",
                    dir.string(), saved.precision, cfg.precision, saved.precision));
  }
  if (saved.optimizer != cfg.optimizer) {
    throw TrainError(
        fmt::format("checkpoint {} was trained with optimizer {}, this run asks for "
                    "{}; resume with --optimizer {}",
                    dir.string(), saved.optimizer, cfg.optimizer, saved.optimizer));
  }
  const auto model_file = dir / kModelFile;
  const auto opt_file = dir / kOptimizerFile;
  const SafeTensorsFile weights = read_safetensors(model_file);
  const SafeTensorsFile opt_tensors = read_safetensors(opt_file);
  load_module_state(*model, weights, model_file.string());
  const auto& os = state.at("optimizer");
  detail::load_optimizer_state(*opt, opt_tensors, os.value("state", nlohmann::json::object()),
                               opt_file.string());
  source->restore(state.at("data"));
  if (state.contains("rng") && state["rng"].contains("dropout")) {
    detail::restore_dropout_streams(*model, state["rng"]["dropout"]);
  }
  std::map<std::string, double> rs;
  if (state.contains("recipe") && state["recipe"].contains("state")) {
    for (const auto& [k, v] : state["recipe"]["state"].items()) rs[k] = v.get<double>();
  }
  recipe->load_state(rs);
  step = state.at("step").get<int64_t>();
  skipped = state.value("skipped_steps", int64_t(0));
  if (state.contains("last_loss") && state["last_loss"].is_number()) {
    last_loss = state["last_loss"].get<double>();
  }
  if (state.contains("metrics") && state["metrics"].is_object()) {
    prior_train_time_s = state["metrics"].value("train_time_s", 0.0);
  }
}

}  // namespace mixp::train
