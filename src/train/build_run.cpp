// build_run: configuration -> recipe, data and model (include/mixp/train/build_run.h).
#include "mixp/dist/process_group.h"
#include "sharded_source.h"
#include "mixp/train/build_run.h"

#include <fmt/format.h>

#include <algorithm>
#include <thread>

#include <filesystem>

#include "mixp/backend/backend.h"
#include "mixp/nn/llama_presets.h"
#include "mixp/nn/lora_io.h"
#include "mixp/train/recipe_registry.h"
#include "trainer_impl.h"

namespace mixp::train {

namespace {

RecipeOptions recipe_options(const TrainConfig& c, RunPurpose purpose) {
  RecipeOptions ro;
  // Gradient checkpointing is for memory; its peak is the end of backward, where autocast's
  // weight shadows would be the only low-precision copies alive (docs/amp.md): cast per region.
  ro.weight_shadows = !c.model.checkpointing;
  switch (purpose) {
    case RunPurpose::train:
      ro.layer_precision = c.layer_precision;
      ro.loss_scale_init = c.loss_scale_init;
      ro.growth_interval = c.growth_interval;
      ro.qat_freeze_bn_epoch = c.qat_freeze_bn_epoch;
      ro.qat_disable_observer_epoch = c.qat_disable_observer_epoch;
      ro.seed = c.seed;
      break;
    case RunPurpose::evaluate:
      // Forward passes only: the loss-scale options would be refused by a recipe that does not
      // scale the loss (an fp16 checkpoint evaluated in bf16).
      ro.layer_precision = c.layer_precision;
      if (is_recipe_family(c.precision, RecipeFamily::int8_qat) ||
          is_recipe_family(c.precision, RecipeFamily::lowbit_qat)) {
        ro.qat_freeze_bn_epoch = c.qat_freeze_bn_epoch;
        ro.qat_disable_observer_epoch = c.qat_disable_observer_epoch;
      }
      break;
    case RunPurpose::calibrate:
      break;
  }
  return ro;
}

}  // namespace

namespace detail {

void check_save_dir(const std::filesystem::path& dir) {
  std::error_code ec;
  if (std::filesystem::exists(dir, ec) && !std::filesystem::is_directory(dir, ec)) {
    throw ConfigError("cannot save a checkpoint to " + dir.string() +
                      ": it exists and is not a folder; name a folder");
  }
  std::filesystem::path parent = std::filesystem::absolute(dir, ec).parent_path();
  if (!std::filesystem::is_directory(parent, ec)) {
    throw ConfigError("cannot save a checkpoint to " + dir.string() + ": its parent folder " +
                      parent.string() + " does not exist; create it first");
  }
}

}  // namespace detail

TrainConfig without_outputs(TrainConfig c) {
  c.resume_dir.clear();
  c.save_dir.clear();
  c.save_every = 0;
  c.log_path.clear();
  return c;
}

RunParts build_run(const TrainConfig& config, RunPurpose purpose, bool with_model) {
  const bool training = purpose == RunPurpose::train;
  RunParts p;
  p.config = (training ? config : without_outputs(config)).resolved();
  TrainConfig& c = p.config;
  if (training && !c.save_dir.empty()) detail::check_save_dir(c.save_dir);
  dist::ProcessGroup& world = dist::world();
  if (c.threads > 0) {
    set_num_threads(c.threads);
  } else if (world.size() > 1) {
    // Ranks on one machine share its cores (docs/distributed.md, "Threads").
    const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
    set_num_threads(std::max(1, cores / std::max(1, world.local_size())));
  }
  p.recipe = make_recipe(c.precision, recipe_options(c, purpose));
  // The QAT recipes convert the built-in mlp and cnn into int8 / low-bit models; quant::prepare_qat
  // also takes other Module trees (a custom model trains with fake quantization only), so the
  // registry's list of built-in models a recipe does not train is what refuses the gpt family.
  if (!recipe_supports_model(p.recipe->name(), c.model.name)) {
    throw ConfigError(fmt::format(
        "precision '{}' quantizes models built of Linear/Conv2d/BatchNorm2d/ReLU/MaxPool2d layers "
        "(mlp, cnn) into its inference model; {} is not one (docs/quantization.md)",
        p.recipe->name(), c.model.name));
  }
  // `auto` becomes the recipe it picked on this machine, so that the checkpoint names it.
  if (training) c.precision = p.recipe->name();
  const bool lm = is_language_model(c.model.name);
  if (nn::is_llama_model(c.model.name) && !c.init_from.empty()) detail::apply_llama_hf_shape(c);
  if (lm && c.model.context == 0) c.model.context = detail::resolve_model(c.model).context;
  if (training && world.size() > 1) {
    // This rank's slice of every global batch of `batch` x ranks samples (sharded_source.h).
    TrainConfig global = c;
    global.batch = c.batch * world.size();
    p.data = std::make_unique<detail::ShardedSource>(
        detail::make_batch_source(global, c.model.context, true), world.rank(), world.size());
  } else {
    p.data = detail::make_batch_source(c, c.model.context, purpose != RunPurpose::evaluate);
  }
  if (lm) {
    const int64_t v = p.data->vocab_size();
    if (!training && v != c.model.vocab) {
      throw TrainError(
          fmt::format("the checkpoint's model has a vocabulary of {} tokens but the corpus "
                      "{} has {}; evaluate on the corpus it was trained on",
                      c.model.vocab, c.data, v));
    }
    // A LLaMA-family model's vocabulary is its tokenizer's: a token file whose ids fit in it
    // (the data's vocabulary is at most the model's) trains it.
    const bool fits = nn::is_llama_model(c.model.name) && c.model.vocab >= v;
    if (c.model.vocab != 0 && c.model.vocab != v && !fits) {
      throw TrainError(
          fmt::format("the model's vocabulary has {} tokens but the corpus {} has {}; a gpt "
                      "checkpoint can only "
                      "continue on a corpus with the same characters",
                      c.model.vocab, c.data, v));
    }
    if (!fits) c.model.vocab = v;
  }
  c.model = detail::resolve_model(c.model);  // explicit shape in state.json
  if (!c.lora_from.empty() && !c.lora.empty() && training && c.resume_dir.empty()) {
    throw ConfigError(
        "--lora and --lora-from both given: the adapter's adapter_config.json sets r, "
        "alpha, dropout and the targets; give one");
  }
  if (with_model) p.model = detail::build_model(c, *p.recipe, training && c.resume_dir.empty());
  // The loaded adapter's options, recorded (state.json) so that a resumed run rebuilds them.
  if (with_model && training && c.resume_dir.empty() && !c.lora_from.empty()) {
    try {
      c.lora = nn::read_lora_config(*p.model, c.lora_from).str();
    } catch (const std::invalid_argument& e) {
      throw ConfigError(e.what());
    }
  }
  return p;
}

}  // namespace mixp::train
