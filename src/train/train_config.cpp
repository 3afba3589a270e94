#include "mixp/train/train_config.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "mixp/data/image_dataset.h"
#include "mixp/data/text_corpus.h"
#include "mixp/nn/llama_presets.h"
#include "mixp/nn/lora.h"
#include "mixp/nn/models.h"
#include "mixp/optim/lr_schedule.h"
#include "mixp/train/recipe_registry.h"
#include "trainer_impl.h"
#include "util/text.h"

namespace mixp::train {

namespace {

using ::mixp::detail::join;

bool contains(const std::vector<std::string>& v, std::string_view x) {
  for (const auto& e : v)
    if (e == x) return true;
  return false;
}

void require(bool ok, const std::string& message) {
  if (!ok) throw ConfigError(message);
}

}  // namespace

const std::vector<std::string>& optimizer_names() {
  static const std::vector<std::string> v{"adamw", "adam", "sgd"};
  return v;
}

const std::vector<std::string>& schedule_names() {
  static const std::vector<std::string> v = optim::schedule_kind_names();
  return v;
}

bool is_language_model(std::string_view model) {
  return model == "gpt" || nn::is_gpt2_model(model) || nn::is_llama_model(model);
}

int64_t default_batch(std::string_view model) {
  return is_language_model(model) ? 16 : 128;
}

double default_lr(std::string_view model) {
  return is_language_model(model) ? 3e-4 : 1e-3;
}

namespace detail {

void check_loop_config(const TrainConfig& c) {
  require(contains(optimizer_names(), c.optimizer),
          "unknown optimizer '" + c.optimizer + "'; known optimizers: " + join(optimizer_names()));
  require(contains(schedule_names(), c.schedule),
          "unknown learning-rate schedule '" + c.schedule +
              "'; known schedules: " + join(schedule_names()));
  require(!(c.epochs > 0 && c.steps > 0),
          "both epochs (" + std::to_string(c.epochs) + ") and steps (" + std::to_string(c.steps) +
              ") were given; give one: epochs counts passes over the data, steps counts "
              "optimizer steps");
  require(c.epochs >= 0, "the number of epochs must be positive, got " + std::to_string(c.epochs));
  require(c.steps >= 0, "the number of steps must be positive, got " + std::to_string(c.steps));
  require(c.batch >= 0, "the batch size must be positive, got " + std::to_string(c.batch));
  require(c.grad_accum >= 1, "gradient accumulation must be at least 1 micro-batch, got " +
                                 std::to_string(c.grad_accum));
  require(std::isfinite(c.lr) && c.lr >= 0,
          "the learning rate must be a positive number, got " + std::to_string(c.lr));
  require(
      std::isfinite(c.clip) && c.clip >= 0,
      "the clipping norm must be positive (0 turns clipping off), got " + std::to_string(c.clip));
  require(!c.weight_decay || (std::isfinite(*c.weight_decay) && *c.weight_decay >= 0),
          "weight decay must be a non-negative number");
  require(std::isfinite(c.momentum) && c.momentum >= 0 && c.momentum < 1,
          "SGD momentum must lie in [0, 1), got " + std::to_string(c.momentum));
  require(c.warmup_steps >= 0, "warmup steps must be non-negative");
  require(c.threads >= 0,
          "the thread count must be positive (0 = all cores), got " + std::to_string(c.threads));
  require(c.train_limit >= 0 && c.test_limit >= 0, "data-set limits must be non-negative");
  require(c.save_every >= 0, "save_every must be non-negative");
  require(c.grad_comm == "fp32" || c.grad_comm == "bf16" || c.grad_comm == "fp16" ||
              c.grad_comm == "bf16-ring",
          "unknown gradient communication format '" + c.grad_comm +
              "'; use one of fp32, bf16, fp16, bf16-ring");
  require(std::isfinite(c.bucket_mb) && c.bucket_mb > 0,
          "the bucket size (--bucket-mb) must be a positive number of MiB");
  require(std::isfinite(c.comm_timeout) && c.comm_timeout >= 0,
          "the communication timeout (--comm-timeout) must be >= 0 seconds (0 = wait forever)");
  require(c.check_replicas >= 0, "--check-replicas must be >= 0 (0 = never)");
  require(c.zero >= 0 && c.zero <= 3,
          "--zero must be 0 (every rank holds the whole optimizer state), 1 (ZeRO stage 1: it "
          "is sharded over the ranks), 2 (ZeRO stage 2: the gradients too) or 3 (ZeRO stage 3: "
          "and the parameters), got " +
              std::to_string(c.zero));
  require(c.zero < 2 || c.grad_comm != "bf16-ring",
          "--zero " + std::to_string(c.zero) +
              " sends each gradient to its owner only, which the naive ring (--grad-comm "
              "bf16-ring) cannot do; use --grad-comm bf16 (16 bits on the wire, summed in fp32)");
  if (c.optimizer_in_backward) {
    require(c.clip == 0,
            "--optimizer-in-backward updates each parameter as soon as its gradient is ready, "
            "before the global gradient norm exists, so it cannot clip (--clip " +
                fmt::format("{:g}", c.clip) + "); drop --clip or --optimizer-in-backward");
    require(c.grad_accum == 1,
            "--optimizer-in-backward updates each parameter at the end of every backward, so it "
            "cannot accumulate gradients over micro-batches (--grad-accum " +
                std::to_string(c.grad_accum) +
                "); use --grad-accum 1 (a larger --batch instead) or drop --optimizer-in-backward");
  }
  require(c.save_every == 0 || !c.save_dir.empty(),
          "saving every N steps needs a checkpoint folder (--save DIR)");
}

}  // namespace detail

TrainConfig TrainConfig::resolved() const {
  TrainConfig c = *this;
  const std::vector<std::string> models = nn::model_names();
  require(!c.model.name.empty(), "no model given; choose one of: " + join(models));
  require(contains(models, c.model.name),
          "unknown model '" + c.model.name + "'; known models: " + join(models));
  detail::check_loop_config(c);
  if (c.epochs == 0 && c.steps == 0) c.epochs = 1;
  if (c.batch == 0) c.batch = default_batch(c.model.name);
  if (c.lr == 0) c.lr = default_lr(c.model.name);
  if (c.model.seed == 0) c.model.seed = c.seed;
  if (!c.lora_out.empty() && c.lora.empty() && c.lora_from.empty())
    throw ConfigError("--lora-out writes LoRA adapters: give --lora or --lora-from too");
  if (is_recipe_family(c.precision, RecipeFamily::qlora) && c.lora.empty() && c.lora_from.empty())
    throw ConfigError(fmt::format(
        "--precision {} trains LoRA adapters on a frozen 4-bit base: give --lora "
        "r=16,alpha=32,targets=... (or --lora-from DIR); without adapters nothing would train",
        c.precision));
  if (!c.lora.empty()) {
    try {
      c.lora = nn::LoraOptions::parse(c.lora).str();  // canonical, as state.json records it
    } catch (const std::invalid_argument& e) {
      throw ConfigError(e.what());
    }
  }
  if (c.data.empty()) {
    c.data = is_language_model(c.model.name) ? data::kDefaultCorpusDir : kFashionMnistData;
  }
  return c;
}

// ---------------------------------------------------------------------------------------------
// JSON. Every field, so a checkpoint rebuilds the run exactly; nlohmann writes doubles in their
// shortest round-trip form, so lr and friends come back bit for bit.

std::string config_to_json(const TrainConfig& c) {
  nlohmann::ordered_json m;
  m["name"] = c.model.name;
  m["width"] = c.model.width;
  m["layers"] = c.model.layers;
  m["heads"] = c.model.heads;
  m["context"] = c.model.context;
  m["vocab"] = c.model.vocab;
  m["mlp_width"] = c.model.mlp_width;
  if (c.model.kv_heads != 0) m["kv_heads"] = c.model.kv_heads;  // llama family only
  m["seed"] = c.model.seed;
  m["checkpointing"] = c.model.checkpointing;

  nlohmann::ordered_json j;
  j["model"] = m;
  j["data"] = c.data;
  j["train_limit"] = c.train_limit;
  j["test_limit"] = c.test_limit;
  j["precision"] = c.precision;
  j["layer_precision"] = c.layer_precision;
  j["loss_scale_init"] = c.loss_scale_init ? nlohmann::ordered_json(*c.loss_scale_init) : nullptr;
  j["growth_interval"] = c.growth_interval ? nlohmann::ordered_json(*c.growth_interval) : nullptr;
  if (c.qat_freeze_bn_epoch) j["qat_freeze_bn_epoch"] = *c.qat_freeze_bn_epoch;
  if (c.qat_disable_observer_epoch) j["qat_disable_observer_epoch"] = *c.qat_disable_observer_epoch;
  j["epochs"] = c.epochs;
  j["steps"] = c.steps;
  j["batch"] = c.batch;
  j["grad_accum"] = c.grad_accum;
  j["lr"] = c.lr;
  j["optimizer"] = c.optimizer;
  j["weight_decay"] = c.weight_decay ? nlohmann::ordered_json(*c.weight_decay) : nullptr;
  j["momentum"] = c.momentum;
  j["clip"] = c.clip;
  j["schedule"] = c.schedule;
  j["warmup_steps"] = c.warmup_steps;
  j["seed"] = c.seed;
  j["threads"] = c.threads;
  j["evaluate"] = c.evaluate;
  j["save_dir"] = c.save_dir;
  j["save_every"] = c.save_every;
  j["resume_dir"] = c.resume_dir;
  j["init_from"] = c.init_from;
  j["log_path"] = c.log_path;
  // The data-parallel settings only when they differ from the defaults, so that the state.json
  // of a single-process run stays what it was (tests/golden_runs pins it).
  const TrainConfig d;
  if (c.grad_comm != d.grad_comm) j["grad_comm"] = c.grad_comm;
  if (c.bucket_mb != d.bucket_mb) j["bucket_mb"] = c.bucket_mb;
  if (c.comm_overlap != d.comm_overlap) j["comm_overlap"] = c.comm_overlap;
  if (c.comm_timeout != d.comm_timeout) j["comm_timeout"] = c.comm_timeout;
  if (c.check_replicas != d.check_replicas) j["check_replicas"] = c.check_replicas;
  if (c.zero != d.zero) j["zero"] = c.zero;
  if (c.zero3_prefetch != d.zero3_prefetch) j["zero3_prefetch"] = c.zero3_prefetch;
  // Likewise only when on (tests/golden_runs pins the state.json of runs without it).
  if (c.optimizer_in_backward) j["optimizer_in_backward"] = true;
  if (!c.lora.empty()) j["lora"] = c.lora;
  if (!c.lora_from.empty()) j["lora_from"] = c.lora_from;
  if (!c.lora_out.empty()) j["lora_out"] = c.lora_out;
  return j.dump(2);
}

namespace {
// A field of the stored configuration, type- and range-checked, naming the field (a checkpoint's
// state.json may be damaged or edited: "batch": 1e300 or "data": null must say so).
template <class T>
void get_value(const nlohmann::json& v, const std::string& key, T& out) {
  auto bad = [&](const char* want) {
    throw ConfigError("the training configuration's \"" + key + "\" is " + v.dump().substr(0, 60) +
                      ", not " + want);
  };
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) bad("true or false");
    out = v.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    if (!v.is_number_integer()) bad("a whole number");
    if constexpr (std::is_unsigned_v<T>) {
      if (v.is_number_unsigned()) {
        out = v.get<T>();
      } else if (v.get<int64_t>() < 0) {
        bad("a non-negative whole number");
      } else {
        out = T(v.get<int64_t>());
      }
    } else {
      if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<T>::max())) {
        bad("a whole number in range");
      }
      const int64_t x = v.is_number_unsigned() ? int64_t(v.get<uint64_t>()) : v.get<int64_t>();
      if (x < int64_t(std::numeric_limits<T>::min()) ||
          x > int64_t(std::numeric_limits<T>::max())) {
        bad("a whole number in range");
      }
      out = T(x);
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!v.is_number() || !std::isfinite(v.get<double>())) bad("a finite number");
    out = v.get<T>();
  } else {
    if (!v.is_string()) bad("a string");
    out = v.get<T>();
  }
}
template <class T>
void get(const nlohmann::json& j, const char* key, T& out) {
  if (j.contains(key) && !j[key].is_null()) get_value(j[key], key, out);
}
template <class T>
void get(const nlohmann::json& j, const char* key, std::optional<T>& out) {
  if (j.contains(key) && !j[key].is_null()) {
    T v{};
    get_value(j[key], key, v);
    out = v;
  }
}
}  // namespace

TrainConfig config_from_json(std::string_view text) {
  TrainConfig c;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (!j.is_object()) throw ConfigError("the training configuration is not a JSON object");
    if (j.contains("model")) {
      const auto& m = j["model"];
      if (!m.is_object())
        throw ConfigError("the training configuration's \"model\" is not an object");
      get(m, "name", c.model.name);
      get(m, "width", c.model.width);
      get(m, "layers", c.model.layers);
      get(m, "heads", c.model.heads);
      get(m, "context", c.model.context);
      get(m, "vocab", c.model.vocab);
      get(m, "mlp_width", c.model.mlp_width);
      get(m, "kv_heads", c.model.kv_heads);
      get(m, "seed", c.model.seed);
      get(m, "checkpointing", c.model.checkpointing);
    }
    get(j, "data", c.data);
    get(j, "train_limit", c.train_limit);
    get(j, "test_limit", c.test_limit);
    get(j, "precision", c.precision);
    get(j, "layer_precision", c.layer_precision);
    get(j, "loss_scale_init", c.loss_scale_init);
    get(j, "growth_interval", c.growth_interval);
    get(j, "qat_freeze_bn_epoch", c.qat_freeze_bn_epoch);
    get(j, "qat_disable_observer_epoch", c.qat_disable_observer_epoch);
    get(j, "epochs", c.epochs);
    get(j, "steps", c.steps);
    get(j, "batch", c.batch);
    get(j, "grad_accum", c.grad_accum);
    get(j, "lr", c.lr);
    get(j, "optimizer", c.optimizer);
    get(j, "weight_decay", c.weight_decay);
    get(j, "momentum", c.momentum);
    get(j, "clip", c.clip);
    get(j, "schedule", c.schedule);
    get(j, "warmup_steps", c.warmup_steps);
    get(j, "seed", c.seed);
    get(j, "threads", c.threads);
    get(j, "evaluate", c.evaluate);
    get(j, "save_dir", c.save_dir);
    get(j, "save_every", c.save_every);
    get(j, "resume_dir", c.resume_dir);
    get(j, "init_from", c.init_from);
    get(j, "log_path", c.log_path);
    get(j, "grad_comm", c.grad_comm);
    get(j, "bucket_mb", c.bucket_mb);
    get(j, "comm_overlap", c.comm_overlap);
    get(j, "comm_timeout", c.comm_timeout);
    get(j, "check_replicas", c.check_replicas);
    get(j, "zero", c.zero);
    get(j, "zero3_prefetch", c.zero3_prefetch);
    get(j, "optimizer_in_backward", c.optimizer_in_backward);
    get(j, "lora", c.lora);
    get(j, "lora_from", c.lora_from);
    get(j, "lora_out", c.lora_out);
  } catch (const nlohmann::json::exception& e) {
    std::string what = e.what();
    if (auto pos = what.find("] "); pos != std::string::npos) what.erase(0, pos + 2);
    throw ConfigError("malformed training configuration: " + what);
  }
  return c;
}

}  // namespace mixp::train
