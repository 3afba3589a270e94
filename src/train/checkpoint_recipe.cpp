// The recorded configuration of a checkpoint checked against itself and against its weights
// (docs/train.md, "What is verified on load"): every load path (resume, mixp eval, mixp quantize)
// goes through these, so that a state.json edited by hand, or one put next to another run's
// weights, is refused with the file and the field named instead of loading with other numbers.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "mixp/nn/module.h"
#include "mixp/nn/models.h"
#include "mixp/train/checkpoint.h"
#include "mixp/train/recipe.h"
#include "trainer_impl.h"

namespace mixp::train {

namespace {

[[noreturn]] void refuse(const std::string& source, const std::string& field,
                         const std::string& value, const std::string& why) {
  throw TrainError(fmt::format(
      "{}: \"{}\" is {}: {}; the checkpoint is damaged (or was edited), so it is refused", source,
      field, value, why));
}

// The "model" entry of model.safetensors' __metadata__ (checkpoint.h: the Trainer writes it),
// read from the header alone; empty when absent or unreadable (the full parse reports that).
std::string saved_model_name(const std::vector<std::byte>& bytes) {
  if (bytes.size() < 8) return {};
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  if (n > bytes.size() - 8) return {};
  const auto* p = reinterpret_cast<const char*>(bytes.data()) + 8;
  const nlohmann::json h = nlohmann::json::parse(p, p + n, nullptr, /*exceptions=*/false);
  if (!h.is_object() || !h.contains("__metadata__") || !h["__metadata__"].is_object()) return {};
  const auto& m = h["__metadata__"];
  return m.contains("model") && m["model"].is_string() ? m["model"].get<std::string>() : "";
}

}  // namespace

void detail::check_recorded_recipe_name(const std::string& source, const nlohmann::json& state,
                                        const std::string& precision,
                                        const PrecisionRecipe& recipe) {
  if (state.contains("recipe") && state["recipe"].contains("name") &&
      state["recipe"]["name"] != recipe.name()) {
    throw TrainError(fmt::format(
        "{}: \"recipe.name\" is {} but \"config.precision\" \"{}\" makes the recipe \"{}\": the "
        "file contradicts itself (edited by hand?); the checkpoint is refused",
        source, state["recipe"]["name"].dump(), precision, recipe.name()));
  }
}

std::unique_ptr<PrecisionRecipe> check_checkpoint_config(const CheckpointFiles& ck) {
  const std::string source = ck.path(kStateFile).string();
  const nlohmann::json state = nlohmann::json::parse(ck.state_text);  // validated already
  const TrainConfig& c = ck.config;
  // A model of the Trainer's own (TrainOptions::model) has a name mixp does not build; the
  // weights' "model" metadata still has to agree with it.
  if (c.model.name.empty()) {
    refuse(source, "config.model.name", "\"\"", "no model is named");
  }
  const std::vector<std::string> models = nn::model_names();
  const bool builtin = std::find(models.begin(), models.end(), c.model.name) != models.end();
  if (const auto* w = ck.folder.find(kModelFile)) {
    const std::string saved = saved_model_name(*w);
    if (!saved.empty() && saved != c.model.name) {
      refuse(source, "config.model.name", nlohmann::json(c.model.name).dump(),
             fmt::format("{} was saved from a \"{}\" model", ck.path(kModelFile).string(), saved));
    }
  }
  try {
    if (builtin) (void)c.resolved();
  } catch (const ConfigError& e) {
    throw TrainError(fmt::format(
        "{}: the recorded configuration (\"config\") is refused: {}; the checkpoint is damaged (or "
        "was edited)",
        source, e.what()));
  }
  // The data set the data order runs over, as recorded at save (trainer_state.cpp): the same
  // "data" as the configuration, so an edited "config.data" is a contradiction.
  const auto& cj = state["config"];
  if (cj.contains("data_fingerprint")) {
    const auto& fp = cj["data_fingerprint"];
    if (!fp.is_object() || !fp.contains("data") || !fp["data"].is_string() ||
        !fp.contains("train") || !fp["train"].is_string()) {
      refuse(source, "config.data_fingerprint", fp.dump().substr(0, 60),
             "not an object {\"data\": ..., \"train\": ...}");
    }
    if (fp["data"] != c.data) {
      refuse(source, "config.data", nlohmann::json(c.data).dump(),
             fmt::format("the checkpoint was trained on {} (\"config.data_fingerprint.data\")",
                         fp["data"].dump()));
    }
  }
  // The batch the data order was saved with (image data: "data.batch_size", the global batch of
  // all ranks; gpt: the same).
  const auto& data = state["data"];
  if (data.contains("batch_size") && data["batch_size"].is_number_integer()) {
    const int64_t ranks = state.value("ranks", int64_t(1));
    if (data["batch_size"].get<int64_t>() != c.batch * ranks) {
      refuse(source, "config.batch", std::to_string(c.batch),
             fmt::format("the saved data order (\"data.batch_size\") is in batches of {}{}",
                         data["batch_size"].dump(),
                         ranks > 1 ? fmt::format(" ({} ranks)", ranks) : std::string()));
    }
  }
  std::unique_ptr<PrecisionRecipe> recipe;
  try {
    (void)make_recipe(c.precision);
  } catch (const ConfigError& e) {
    refuse(source, "config.precision", nlohmann::json(c.precision).dump(), e.what());
  }
  try {
    RecipeOptions ro;
    ro.layer_precision = c.layer_precision;
    recipe = make_recipe(c.precision, ro);
  } catch (const ConfigError& e) {
    refuse(source, "config.layer_precision", nlohmann::json(c.layer_precision).dump(), e.what());
  }
  detail::check_recorded_recipe_name(source, state, c.precision, *recipe);
  return recipe;
}

void check_checkpoint_weights(const CheckpointFiles& ck, const SafeTensorsFile& weights,
                              const nn::Module* prepared) {
  std::shared_ptr<nn::Module> built;
  std::unique_ptr<PrecisionRecipe> recipe;
  if (!prepared) {
    recipe = check_checkpoint_config(ck);
    TrainConfig c = ck.config.resolved();
    c.model = detail::resolve_model(c.model);
    built = detail::build_model(c, *recipe, /*with_init=*/false);
    prepared = built.get();
  }
  std::vector<std::pair<std::string, Tensor>> targets = prepared->named_parameters();
  for (auto& b : prepared->named_buffers()) targets.push_back(b);
  const std::string file = ck.path(kModelFile).string();
  for (const auto& [name, t] : targets) {
    const SafeTensor* s = weights.find(name);
    if (!s || s->dtype == t.dtype() || !traits(s->dtype).is_float() || !t.is_floating_point())
      continue;
    throw TrainError(fmt::format(
        "{}: tensor '{}' is stored as {} but the recipe recorded in {} (precision \"{}\"{}) keeps "
        "it in {}: the weights do not belong to that recipe (state.json edited, or put next to "
        "another run's weights), so the checkpoint is refused",
        file, name, traits(s->dtype).name, ck.path(kStateFile).string(), ck.config.precision,
        ck.config.layer_precision.empty()
            ? std::string()
            : ", layer precision \"" + ck.config.layer_precision + "\"",
        traits(t.dtype()).name));
  }
}

}  // namespace mixp::train
