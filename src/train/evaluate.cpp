// Evaluation, gradient norms and the `train --json` object.
#include <fmt/format.h>

#include <cmath>

#include "mixp/autograd/grad_mode.h"
#include "mixp/backend/backend.h"
#include "mixp/io/safetensors.h"
#include "mixp/ops/ops.h"
#include "mixp/train/checkpoint.h"
#include "trainer_impl.h"

namespace mixp::train {

namespace detail {

namespace {
// Number of rows of `logits` [N, C] whose largest value is at the target's index (the first
// maximum wins on ties, as torch.argmax does).
template <class T>
int64_t count_correct(const Tensor& logits, const Tensor& target) {
  const int64_t n = logits.size(0), c = logits.size(1);
  const T* x = logits.data<T>();
  const int32_t* y = target.data<int32_t>();
  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    const T* row = x + i * c;
    int64_t best = 0;
    for (int64_t j = 1; j < c; ++j)
      if (row[j] > row[best]) best = j;
    correct += best == y[i];
  }
  return correct;
}

}  // namespace

EvalResult evaluate_model(nn::Module& model, BatchSource& source, const PrecisionRecipe& recipe,
                          bool language_model) {
  NoGradGuard ng;
  const bool was_training = model.is_training();
  model.train(false);
  EvalResult r;
  double loss_sum = 0;
  int64_t rows = 0, correct = 0;
  for (int64_t i = 0, n = source.eval_batches(); i < n; ++i) {
    const Batch b = source.eval_batch(i);
    Tensor logits;
    Tensor loss;
    {
      auto scope = recipe.forward_scope();
      logits = model(b.input);  // through the recipe's forward wrappers
      if (language_model) logits = logits.reshape({-1, logits.size(-1)});
      loss = cross_entropy(logits, b.target);
    }
    const int64_t n_rows = logits.size(0);
    loss_sum += loss.item() * double(n_rows);  // cross_entropy is a mean over the rows
    rows += n_rows;
    if (!language_model) {
      const Tensor l = logits.contiguous();
      correct +=
          l.dtype() == DType::fp64
              ? count_correct<double>(l, b.target)
              : count_correct<float>(l.dtype() == DType::fp32 ? l : l.to(DType::fp32), b.target);
    }
    r.samples += b.samples;
  }
  model.train(was_training);
  r.loss = rows > 0 ? loss_sum / double(rows) : std::nan("");
  if (!language_model) r.accuracy = rows > 0 ? double(correct) / double(rows) : std::nan("");
  return r;
}

}  // namespace detail

EvalResult evaluate_checkpoint(const std::filesystem::path& dir, const std::string& precision,
                               const std::string& data) {
  TrainConfig c = read_checkpoint_config(dir);
  // Per-layer rules belong to the precision they were trained with.
  if (!precision.empty() && precision != c.precision) c.layer_precision.clear();
  if (!precision.empty()) c.precision = precision;
  if (!data.empty()) c.data = data;
  c.resume_dir.clear();
  c.save_dir.clear();
  c.save_every = 0;
  c.log_path.clear();
  c = c.resolved();
  if (c.threads > 0) set_num_threads(c.threads);
  const bool lm = is_language_model(c.model.name);
  RecipeOptions ro;
  ro.layer_precision = c.layer_precision;
  const auto recipe = make_recipe(c.precision, ro);
  auto source = detail::make_batch_source(c, c.model.context, /*train=*/false);
  if (lm && source->vocab_size() != c.model.vocab) {
    throw TrainError(
        fmt::format("the checkpoint's model has a vocabulary of {} tokens but the corpus "
                    "{} has {}; evaluate on the corpus it was trained on",
                    c.model.vocab, c.data, source->vocab_size()));
  }
  auto model = detail::build_model(c, *recipe);
  const auto file = dir / kModelFile;
  load_module_state(*model, read_safetensors(file), file.string());
  return detail::evaluate_model(*model, *source, *recipe, lm);
}

namespace {
nlohmann::ordered_json opt_number(const std::optional<double>& v) {
  return v && std::isfinite(*v) ? nlohmann::ordered_json(*v) : nlohmann::ordered_json();
}
nlohmann::ordered_json finite_or_null(double v) {
  return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json();
}
}  // namespace

std::string result_to_json(const TrainResult& r, int indent) {
  nlohmann::ordered_json j;
  j["model"] = r.model;
  j["precision"] = r.precision;
  j["optimizer"] = r.optimizer;
  j["data"] = r.data;
  j["steps"] = r.steps;
  j["steps_this_run"] = r.steps_this_run;
  j["skipped_steps"] = r.skipped_steps;
  j["skipped_steps_this_run"] = r.skipped_steps_this_run;
  j["loss_scale"] = r.loss_scale;
  j["recipe"] = r.recipe;
  if (!r.layer_precision.empty()) j["layer_precision"] = r.layer_precision;
  j["epochs"] = r.epochs;
  j["batch"] = r.batch;
  j["grad_accum"] = r.grad_accum;
  j["ms_per_step"] = r.ms_per_step;
  j["samples_per_s"] = r.samples_per_s;
  if (r.model == "gpt" || r.tokens_per_s > 0) j["tokens_per_s"] = r.tokens_per_s;
  if (r.val_loss || r.model == "gpt") {
    j["val_loss"] = opt_number(r.val_loss);
  } else {
    j["test_accuracy"] = opt_number(r.test_accuracy);
    j["test_loss"] = opt_number(r.test_loss);
  }
  j["final_loss"] = finite_or_null(r.final_loss);
  j["peak_memory_bytes"] = r.peak_memory_bytes;
  j["peak_rss_bytes"] = r.peak_rss_bytes;
  j["energy_joules"] = opt_number(r.energy_joules);
  j["energy_source"] = r.energy_source;
  j["train_time_s"] = r.train_time_s;
  j["total_time_s"] = r.total_time_s;
  j["threads"] = r.threads;
  j["parameters"] = r.parameters;
  j["seed"] = r.seed;
  if (!r.saved_to.empty()) j["checkpoint"] = r.saved_to;
  return j.dump(indent);
}

}  // namespace mixp::train
