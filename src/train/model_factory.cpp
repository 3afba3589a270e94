// The Trainer's bridge to the nn and optim modules: building the model and optimizer a config
// names, the learning-rate schedule, and optimizer state in checkpoints.
#include <fmt/format.h>

#include "mixp/nn/models.h"
#include "mixp/optim/adam.h"
#include "mixp/optim/lr_schedule.h"
#include "mixp/optim/sgd.h"
#include "trainer_impl.h"

namespace mixp::train::detail {

std::unique_ptr<nn::Module> build_model(const TrainConfig& c, const PrecisionRecipe& recipe) {
  auto model = nn::make_model(c.model);
  recipe.prepare_model(*model);
  return model;
}

std::unique_ptr<optim::Optimizer> build_optimizer(const TrainConfig& c, const std::vector<Tensor>& params) {
  if (c.optimizer == "sgd") {
    optim::SGDOptions o;
    o.lr = c.lr;
    o.momentum = c.momentum;
    if (c.weight_decay) o.weight_decay = *c.weight_decay;
    return std::make_unique<optim::SGD>(params, o);
  }
  optim::AdamOptions o;
  o.lr = c.lr;
  if (c.weight_decay) o.weight_decay = *c.weight_decay;
  if (c.optimizer == "adam") return std::make_unique<optim::Adam>(params, o);
  return std::make_unique<optim::AdamW>(params, o);
}

double schedule_lr(const TrainConfig& c, int64_t step, int64_t total) {
  optim::LrSchedule s;
  s.kind = c.schedule;
  s.base_lr = c.lr;
  s.warmup_steps = c.warmup_steps;
  s.total_steps = total;
  return s.lr_at(step);
}

void save_optimizer_state(const optim::Optimizer& opt, SafeTensorsFile& tensors, nlohmann::json& scalars) {
  const auto sd = opt.state_dict();
  for (const auto& [name, t] : sd.tensors) tensors.tensors.push_back(to_safetensor(name, t));
  for (const auto& [name, v] : sd.scalars) scalars[name] = v;
}

void load_optimizer_state(optim::Optimizer& opt, const SafeTensorsFile& tensors,
                          const nlohmann::json& scalars, const std::string& source) {
  auto sd = opt.state_dict();
  for (auto& [name, t] : sd.tensors) {
    const SafeTensor* s = tensors.find(name);
    if (!s) {
      throw TrainError(fmt::format("{} has no optimizer state '{}'; the checkpoint belongs to a "
                                   "different model or optimizer",
                                   source, name));
    }
    if (s->shape != dims(t.shape())) {
      throw TrainError(fmt::format("{}: optimizer state '{}' has shape {} but the model needs {}",
                                   source, name, Shape(s->shape.begin(), s->shape.end()).str(),
                                   t.shape().str()));
    }
    copy_from_safetensor(t, *s);
  }
  for (auto& [name, v] : sd.scalars) {
    if (scalars.contains(name)) v = scalars[name].get<double>();
  }
  opt.load_state_dict(sd);
}

}  // namespace mixp::train::detail
