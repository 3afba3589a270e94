// build_run: the one place where a TrainConfig becomes the parts of a run (recipe, data, model).
// `mixp train` (the Trainer), `mixp eval` (evaluate_checkpoint), `mixp quantize`
// (quantize_checkpoint) and `mixp compare` (the study runner, through the Trainer) all start here,
// so that they resolve a configuration, pick the recipe and load the data the same way.
#pragma once
#include <memory>

#include "mixp/train/data_source.h"
#include "mixp/train/recipe.h"
#include "mixp/train/train_config.h"

namespace mixp::nn {
class Module;
}

namespace mixp::train {

// What the run is for; it decides what build_run loads and which options reach the recipe.
enum class RunPurpose {
  // Training (the Trainer): checks the checkpoint folder's parent, passes every recipe option
  // (per-layer rules, loss scaling, int8-qat epochs, seed), loads the training and evaluation
  // data, and replaces the precision by the recipe's canonical name (`auto` by what it picked).
  train,
  // Evaluating a checkpoint (mixp eval): the recipe gets the per-layer rules (and int8-qat its
  // epochs), only the evaluation data is loaded.
  evaluate,
  // Calibrating a checkpoint for post-training quantization (mixp quantize): the recipe gets no
  // options; training data (to calibrate on) and evaluation data are loaded.
  calibrate,
};

// The parts of a run.
struct RunParts {
  TrainConfig config;  // resolved; gpt: vocabulary and context filled in
  std::unique_ptr<PrecisionRecipe> recipe;
  std::unique_ptr<DataSource> data;
  std::shared_ptr<nn::Module> model;  // built and prepared by the recipe; null when not asked for
};

// A copy of `c` that writes nothing and resumes nothing: no checkpoint folder, no periodic saves,
// no resume folder, no step log. For runs that reuse a configuration that had outputs (a
// checkpoint's, or the study's base configuration).
TrainConfig without_outputs(TrainConfig c);

// Resolves `config` (TrainConfig::resolved; evaluate and calibrate first drop its outputs with
// without_outputs), sets the thread count (config.threads > 0), makes the recipe, loads the data,
// checks a gpt's vocabulary against the corpus and builds the model (unless `with_model` is false)
// with the recipe applied. Throws ConfigError, data::DataError, TrainError (a vocabulary that does
// not match the corpus).
RunParts build_run(const TrainConfig& config, RunPurpose purpose = RunPurpose::train,
                   bool with_model = true);

}  // namespace mixp::train
