// The Trainer's bridge to the nn and optim modules: building the model and optimizer a config
// names, the learning-rate schedule, and optimizer state in checkpoints.
#include <fmt/format.h>

#include <optional>

#include "mixp/nn/dropout.h"
#include "mixp/nn/gpt2_weights.h"
#include "mixp/nn/llama_hf.h"
#include "mixp/nn/llama_presets.h"
#include "mixp/nn/lora.h"
#include "mixp/nn/lora_io.h"
#include "mixp/nn/models.h"
#include "mixp/optim/adam.h"
#include "mixp/optim/lr_schedule.h"
#include "mixp/optim/sgd.h"
#include "mixp/tensor/generator.h"
#include "trainer_impl.h"

namespace mixp::train::detail {

namespace {
// nn reports a bad shape for the model ("model 'mlp' has no 'heads' to set") with
// std::invalid_argument; for the Trainer that is a configuration error (a usage error in the CLI).
template <class F>
auto as_config_error(F&& f) {
  try {
    return f();
  } catch (const std::invalid_argument& e) {
    std::string m = e.what();
    if (m.rfind("mixp::nn::make_model: ", 0) == 0) m = m.substr(22);
    throw ConfigError(m);
  }
}

// --init-from: GPT-2 weights in any layout (nn/gpt2_weights.h) into a gpt2 model.
void init_gpt2_from(nn::Module& model, const TrainConfig& c) {
  auto* gpt = dynamic_cast<nn::Gpt*>(&model);
  if (!gpt || !nn::is_gpt2_model(c.model.name)) {
    throw ConfigError("--init-from loads GPT-2 weights into --model gpt2 or gpt2-medium, or a "
                      "Hugging Face LLaMA-family directory into --model llama, not '" +
                      c.model.name + "'");
  }
  try {
    nn::load_gpt2_weights(*gpt, nn::read_gpt2_weights(c.init_from, gpt->config().heads),
                          c.init_from);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(e.what());
  }
}

// The LlamaConfig of a llama run with --init-from: config.json's, at the run's context.
nn::LlamaConfig llama_hf_config(const TrainConfig& c) {
  nn::LlamaConfig l;
  try {
    l = nn::read_llama_hf_config(c.init_from).model;
  } catch (const std::invalid_argument& e) {
    throw ConfigError(std::string("--init-from ") + e.what());
  }
  if (c.model.context > 0) l.context = c.model.context;
  l.checkpointing = c.model.checkpointing;
  return l;
}

}  // namespace

void apply_llama_hf_shape(TrainConfig& c) {
  nn::LlamaConfig l = llama_hf_config(c);
  nn::ModelConfig& m = c.model;
  auto same = [&](const char* flag, int64_t& mine, int64_t theirs) {
    if (mine != 0 && mine != theirs) {
      throw ConfigError(fmt::format("{} {} differs from {}'s config.json ({}); leave it out with "
                                    "--init-from",
                                    flag, mine, c.init_from, theirs));
    }
    mine = theirs;
  };
  same("--width", m.width, l.width);
  same("--layers", m.layers, l.layers);
  same("--heads", m.heads, l.heads);
  same("--kv-heads", m.kv_heads, l.kv());
  same("--mlp-width", m.mlp_width, l.mlp_width);
  if (m.vocab != 0 && m.vocab != l.vocab) {
    throw ConfigError(fmt::format("the model's vocabulary ({}) is not {}'s ({})", m.vocab,
                                  c.init_from, l.vocab));
  }
  m.vocab = l.vocab;
  if (m.context == 0) m.context = std::min<int64_t>(l.context, 1024);
  if (m.context > l.context) {
    throw ConfigError(fmt::format("--context {} exceeds {}'s max_position_embeddings {}",
                                  m.context, c.init_from, l.context));
  }
}

nn::ModelConfig resolve_model(const nn::ModelConfig& m) {
  return as_config_error([&] { return nn::resolve_model_config(m); });
}

std::shared_ptr<nn::Module> build_model(const TrainConfig& c, const PrecisionRecipe& recipe,
                                        bool with_init) {
  std::shared_ptr<nn::Module> model;
  if (nn::is_llama_model(c.model.name) && !c.init_from.empty()) {
    // The architecture (theta, rope scaling, tied head, biases) is config.json's, also on resume.
    Generator gen(c.model.seed);
    auto llama =
        as_config_error([&] { return std::make_shared<nn::Llama>(llama_hf_config(c), gen); });
    if (with_init) {
      try {
        nn::load_llama_hf(*llama, c.init_from);
      } catch (const std::invalid_argument& e) {
        throw ConfigError(std::string("--init-from ") + e.what());
      }
    }
    model = llama;
  } else {
    model = as_config_error([&] { return nn::make_model(c.model); });
    if (with_init && !c.init_from.empty()) init_gpt2_from(*model, c);
  }
  recipe.prepare_model(*model);
  // After the recipe: the adapters take the dtype of the weights they adapt, and the recipe's
  // FP8 implementation (or QLoRA's 4-bit GEMM) stays on the frozen base GEMMs only (nn/lora.h).
  const uint64_t lora_seed = Generator::splitmix64(c.model.seed ^ 0x4c6f5241ULL);  // "LoRA"
  if (with_init && !c.lora_from.empty()) {
    as_config_error([&] {
      nn::load_lora_adapter(*model, c.lora_from, lora_seed);
      return 0;
    });
  } else if (!c.lora.empty()) {
    as_config_error(
        [&] { return nn::apply_lora(*model, nn::LoraOptions::parse(c.lora), lora_seed); });
  }
  return model;
}

std::unique_ptr<optim::Optimizer> build_optimizer(const TrainConfig& c,
                                                  const nn::NamedTensors& params,
                                                  const optim::PrecisionOptions& precision) {
  if (c.optimizer == "sgd") {
    optim::SGDOptions o;
    o.precision = precision;
    o.lr = c.lr;
    o.momentum = c.momentum;
    if (c.weight_decay) o.weight_decay = *c.weight_decay;
    return std::make_unique<optim::SGD>(params, o);
  }
  optim::AdamOptions o;
  o.precision = precision;
  o.lr = c.lr;
  o.weight_decay = c.weight_decay;  // unset: 0 for Adam, 0.01 for AdamW (PyTorch's defaults)
  if (c.optimizer == "adam") return std::make_unique<optim::Adam>(params, o);
  return std::make_unique<optim::AdamW>(params, o);
}

double schedule_lr(const TrainConfig& c, int64_t step, int64_t total) {
  optim::LrSchedule s;
  s.kind = optim::parse_schedule_kind(c.schedule);
  s.base_lr = c.lr;
  s.warmup_steps = c.warmup_steps;
  s.total_steps = std::max<int64_t>(total, 1);
  return s.lr_at(step);
}

void save_optimizer_state(const optim::Optimizer& opt, SafeTensorsFile& tensors,
                          nlohmann::json& scalars) {
  const optim::StateDict sd = opt.state_dict();
  for (const auto& [name, t] : sd.tensors) tensors.tensors.push_back(nn::to_safetensor(name, t));
  for (const auto& [name, v] : sd.scalars) scalars[name] = v;
}

namespace {
// The rows `rows` of a whole state tensor `s` (ZeRO 3's piece of it), or null when `s` is not
// whole along dim 0 with the piece's other extents.
std::optional<SafeTensor> state_rows(const SafeTensor& s, const Tensor& piece, const RowPiece& rows) {
  const std::vector<int64_t> want = dims(piece.shape());
  if (want.empty() || s.shape.size() != want.size() || s.shape[0] < rows.row0 + rows.rows ||
      !std::equal(want.begin() + 1, want.end(), s.shape.begin() + 1)) {
    return std::nullopt;
  }
  const size_t row_bytes = s.shape[0] > 0 ? s.data.size() / size_t(s.shape[0]) : 0;
  SafeTensor out;
  out.name = s.name;
  out.dtype = s.dtype;
  out.shape = want;
  out.data.assign(s.data.begin() + ptrdiff_t(size_t(rows.row0) * row_bytes),
                  s.data.begin() + ptrdiff_t(size_t(rows.row0 + rows.rows) * row_bytes));
  return out;
}
}  // namespace

void load_optimizer_state(optim::Optimizer& opt, const SafeTensorsFile& tensors,
                          const nlohmann::json& scalars, const std::string& source, bool shard,
                          const std::map<std::string, RowPiece>* rows) {
  // Shapes, names and dtypes of what the optimizer expects, from its own (fresh) state.
  const optim::StateDict expected = opt.state_dict();
  optim::StateDict sd;
  for (const auto& [name, t] : expected.tensors) {
    const SafeTensor* s = tensors.find(name);
    std::optional<SafeTensor> piece;
    if (s && rows && s->shape != dims(t.shape())) {
      // ZeRO 3: this rank's rows of the state ("<parameter>.<slot>").
      const auto it = rows->find(name.substr(0, name.rfind('.')));
      if (it != rows->end() && (piece = state_rows(*s, t, it->second))) s = &*piece;
    }
    if (!s) {
      throw TrainError(
          fmt::format("{} has no optimizer state '{}' (shape {}); the checkpoint belongs "
                      "to a different model or optimizer",
                      source, name, t.shape().str()));
    }
    if (s->shape != dims(t.shape())) {
      throw TrainError(fmt::format("{}: optimizer state '{}' has shape {} but this run needs {}",
                                   source, name, Shape(s->shape.begin(), s->shape.end()).str(),
                                   t.shape().str()));
    }
    check_loaded_tensor(t, *s, source, "optimizer state");
    // The recipe (the same on resume: --precision must match) decides the state's dtype and the
    // master weights'; another floating dtype means the file is not this recipe's.
    if (s->dtype != t.dtype()) {
      throw TrainError(fmt::format(
          "{}: optimizer state '{}' is stored as {} but the recipe keeps it in {}: the optimizer "
          "state does not belong to the recipe state.json records, so the checkpoint is refused",
          source, name, traits(s->dtype).name, traits(t.dtype()).name));
    }
    Tensor copy = t.clone();
    nn::copy_from_safetensor(copy, *s);
    sd.tensors.emplace_back(name, copy);
  }
  if (!shard && tensors.tensors.size() != expected.tensors.size()) {
    for (const auto& s : tensors.tensors) {
      if (!expected.find_tensor(s.name)) {
        throw TrainError(
            fmt::format("{} has optimizer state '{}' that this run does not have; the "
                        "checkpoint belongs to a different model or optimizer",
                        source, s.name));
      }
    }
  }
  for (const auto& [name, v] : expected.scalars) {
    if (!scalars.contains(name) || !scalars[name].is_number()) {
      throw TrainError(
          fmt::format("{}: the checkpoint's optimizer state has no scalar '{}'", source, name));
    }
    sd.scalars.emplace_back(name, scalars[name].get<double>());
  }
  try {
    opt.load_state_dict(sd);
  } catch (const std::invalid_argument& e) {
    throw TrainError(fmt::format("{}: {}", source, e.what()));
  }
}

nlohmann::json dropout_streams(nn::Module& model) {
  nlohmann::json out = nlohmann::json::object();
  for (auto& [name, m] : model.named_modules()) {
    if (auto* d = dynamic_cast<nn::Dropout*>(m)) {
      out[name] = {{"seed", d->generator().seed()}, {"counter", d->generator().counter()}};
    }
  }
  return out;
}

void restore_dropout_streams(nn::Module& model, const nlohmann::json& streams) {
  for (auto& [name, m] : model.named_modules()) {
    auto* d = dynamic_cast<nn::Dropout*>(m);
    if (!d || !streams.contains(name)) continue;
    d->generator().set_state(streams[name].at("seed").get<uint64_t>(),
                             streams[name].at("counter").get<uint64_t>());
  }
}

}  // namespace mixp::train::detail
