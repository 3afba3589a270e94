// Checkpoint writing and resuming for the Trainer (format: include/mixp/train/checkpoint.h).
#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>

#include "mixp/io/atomic_file.h"
#include "mixp/io/manifest.h"
#include "mixp/io/safetensors.h"
#include "mixp/nn/lora_io.h"
#include "mixp/train/checkpoint.h"
#include "trainer_impl.h"

namespace mixp::train {

namespace {

std::string str(const std::string& v) {
  return v.empty() ? "(none)" : v;
}
std::string str(int64_t v) {
  return std::to_string(v);
}
std::string str(uint64_t v) {
  return std::to_string(v);
}
std::string str(double v) {
  return fmt::format("{:g}", v);
}
std::string str(const std::optional<double>& v) {
  return v ? fmt::format("{:g}", *v) : "(not given: the recipe's default)";
}

[[noreturn]] void refuse(const std::filesystem::path& dir, const char* flag,
                         const std::string& theirs, const std::string& mine,
                         const std::string& why) {
  throw ConfigError(fmt::format(
      "{} {} does not match checkpoint {}, which was trained with {} {}: {}. Drop {} (a resumed "
      "run takes it from the checkpoint), or start a new run without --resume",
      flag, mine, dir.string(), flag, theirs, why, flag));
}

template <class T>
void same(const std::filesystem::path& dir, const char* flag, const T& theirs, const T& mine,
          const std::string& why) {
  if (theirs != mine) refuse(dir, flag, str(theirs), str(mine), why);
}

}  // namespace

// What a resumed run cannot change: the configuration that the checkpoint's weights, optimizer
// state, loss-scale state and data position belong to. Everything else in the configuration
// (length, learning rate and schedule, weight decay, momentum, clipping, growth interval,
// int8-qat epochs, threads, test limit, checkpointing, data location, outputs) is the resumed
// run's own: the CLI takes it from the checkpoint unless a flag overrides it (docs/train.md).
// The precision is compared in resume(), once the recipe has resolved its name.
void Trainer::Impl::check_resume_config(const std::filesystem::path& dir) const {
  resumed = std::make_shared<const CheckpointFiles>(read_checkpoint(dir));
  const nlohmann::json state = nlohmann::json::parse(resumed->state_text);
  const TrainConfig& saved = resumed->config;
  same(dir, "--model", saved.model.name, cfg.model.name,
       "the weights in the checkpoint are that model's");
  same(dir, "--lora", saved.lora, cfg.lora,
       "the checkpoint's adapters (and their optimizer state) have that rank and those targets");
  // Data parallelism: the data order is the global batch's (sharded_source.h), so another number
  // of ranks may continue the run when the global batch stays the same.
  const int64_t saved_ranks = state.value("ranks", int64_t(1));
  const int64_t ranks = dist::world().size();
  const int64_t batch = cfg.batch > 0 ? cfg.batch : default_batch(cfg.model.name);
  if (saved_ranks != ranks && saved_ranks * saved.batch != ranks * batch) {
    const int64_t global = saved_ranks * saved.batch;
    throw ConfigError(fmt::format(
        "{}: the checkpoint was trained with a global batch of {} ({} rank(s) x batch {}), this "
        "run has {} ({} rank(s) x batch {}); the data order continues only with the same global "
        "batch: {}",
        dir.string(), global, saved_ranks, saved.batch, ranks * batch, ranks, batch,
        global % ranks == 0
            ? fmt::format("resume with --batch {} on {} rank(s)", global / ranks, ranks)
            : fmt::format("{} ranks cannot share it evenly; use a number of ranks that divides {}",
                          ranks, global)));
  }
  // Both shapes explicit, as build() will make this run's (state.json holds the resolved one).
  const nn::ModelConfig mine = detail::resolve_model(cfg.model);
  const std::string shape = "the weights in the checkpoint have the model's shape";
  same(dir, "--width", saved.model.width, mine.width, shape);
  same(dir, "--layers", saved.model.layers, mine.layers, shape);
  same(dir, "--heads", saved.model.heads, mine.heads, shape);
  same(dir, "--context", saved.model.context, mine.context, shape);
  same(dir, "--mlp-width", saved.model.mlp_width, mine.mlp_width, shape);
  same(dir, "--kv-heads", saved.model.kv_heads, mine.kv_heads, shape);
  if (saved.data != cfg.data) {
    // A data set that moved may be named in its new place (the number of samples is then checked
    // against the checkpoint's data order); other data may not. mixp cannot tell a moved copy from
    // other data of the same size, so another place is accepted only while the checkpoint's is
    // gone, and never for the named data sets.
    auto keyword = [](const std::string& d) {
      return d == kSyntheticData || d == kFashionMnistData;
    };
    std::error_code ec;
    const bool paths = !keyword(saved.data) && !keyword(cfg.data);
    const bool moved = paths && !std::filesystem::exists(saved.data, ec);
    const bool same_place = paths && std::filesystem::equivalent(saved.data, cfg.data, ec);
    if (!moved && !same_place) {
      refuse(dir, "--data", saved.data, cfg.data,
             paths ? "the data order continues over the checkpoint's data set, which is still "
                     "there; --data may name another place only for that data set moved (its "
                     "old place gone)"
                   : "the data order continues over the checkpoint's data set");
    }
  }
  same(dir, "--layer-precision", saved.layer_precision, cfg.layer_precision,
       "the per-layer rules decide how the parameters and the optimizer state are stored and "
       "whether the loss is scaled");
  same(dir, "--optimizer", saved.optimizer, cfg.optimizer,
       "the optimizer state in the checkpoint (moments, step counts) is that optimizer's");
  // SGD keeps a momentum buffer per parameter only when the momentum is not 0: another non-zero
  // momentum is an override, turning it on or off would need another optimizer state.
  if (cfg.optimizer == "sgd" && (saved.momentum == 0) != (cfg.momentum == 0)) {
    refuse(dir, "--momentum", str(saved.momentum), str(cfg.momentum),
           saved.momentum == 0
               ? "the checkpoint's SGD state has no momentum buffers to continue from (another "
                 "non-zero momentum than the checkpoint's may be given, but not 0 to or from it)"
               : "the checkpoint's SGD state holds momentum buffers that momentum 0 would drop "
                 "(another non-zero momentum than the checkpoint's may be given, but not 0 to or "
                 "from it)");
  }
  if (saved_ranks == ranks) {
    same(dir, "--batch", saved.batch, cfg.batch,
         "the data order continues from the checkpoint's position, counted in batches of that "
         "size");
  }
  same(dir, "--grad-accum", saved.grad_accum, cfg.grad_accum,
       "the steps per epoch, and so the step count, epochs and learning-rate schedule of the "
       "steps already taken, follow it");
  same(dir, "--train-limit", saved.train_limit, cfg.train_limit,
       "the data order continues over the same training samples");
  same(dir, "--seed", saved.seed, cfg.seed,
       "the data order, the stochastic-rounding streams and the dropout masks continue from the "
       "checkpoint's seed");
  if (saved.loss_scale_init != cfg.loss_scale_init) {
    double scale = 0;
    if (state.contains("recipe") && state["recipe"].contains("loss_scale") &&
        state["recipe"]["loss_scale"].is_number()) {
      scale = state["recipe"]["loss_scale"].get<double>();
    }
    refuse(dir, "--loss-scale-init", str(saved.loss_scale_init), str(cfg.loss_scale_init),
           fmt::format("the initial loss scale applies to the first step only, and a resumed run "
                       "continues from the checkpoint's loss scale ({:g}), which is training "
                       "state",
                       scale));
  }
}

// The training set this run loaded against the one the checkpoint was trained on (its
// fingerprint, recorded at save; checkpoints written before mixp recorded it are not checked).
void Trainer::Impl::check_resume_data(const nlohmann::json& state,
                                      const std::string& state_file) const {
  const auto& cj = state.at("config");
  if (!cj.contains("data_fingerprint")) return;
  const auto& rec = cj["data_fingerprint"];  // type-checked by check_checkpoint_config
  const std::string mine = source->fingerprint();
  if (mine.empty() || rec["train"] == mine) return;
  const std::string saved = rec["data"].get<std::string>();
  throw TrainError(fmt::format(
      "{}: the checkpoint was trained on \"{}\" (training set {}), but this run loaded \"{}\" ({}; "
      "training set {}): a resumed run continues the data order over the data set it was "
      "trained on, which may have moved but not changed. {}",
      state_file, saved, rec["train"].get<std::string>(), cfg.data, source->description(), mine,
      cj.value("data", std::string()) == cfg.data
          ? "Give --data naming the data set the checkpoint was trained on"
          : "Drop --data, or name the data set the checkpoint was trained on"));
}

namespace {
// A rank's optimizer state as bytes: the safetensors file, then the scalars' JSON.
std::string serialize_optimizer_shard(const SafeTensorsFile& tensors, const nlohmann::json& s) {
  const std::vector<std::byte> st = serialize_safetensors(tensors);
  std::string out(8, '\0');
  const uint64_t n = st.size();
  std::memcpy(out.data(), &n, 8);
  out.append(reinterpret_cast<const char*>(st.data()), st.size());
  return out + s.dump();
}
// `rows` (ZeRO 3): a state already there is this parameter's rows of the ranks before; the
// shard's rows follow them (ranks in order: the whole state, as one process holds it).
void merge_optimizer_shard(const std::vector<std::byte>& b, SafeTensorsFile& tensors,
                           nlohmann::json& scalars, bool rows) {
  uint64_t n = 0;
  std::memcpy(&n, b.data(), 8);
  SafeTensorsFile shard = parse_safetensors(std::span<const std::byte>(b.data() + 8, n));
  for (auto& t : shard.tensors) {
    SafeTensor* have = rows ? tensors.find(t.name) : nullptr;
    if (!have) {
      tensors.tensors.push_back(std::move(t));
      continue;
    }
    if (have->shape.empty() || t.shape.size() != have->shape.size() || t.dtype != have->dtype ||
        !std::equal(t.shape.begin() + 1, t.shape.end(), have->shape.begin() + 1)) {
      throw std::logic_error("ZeRO 3: the ranks' rows of optimizer state '" + t.name +
                             "' do not fit together");
    }
    have->shape[0] += t.shape[0];
    have->data.insert(have->data.end(), t.data.begin(), t.data.end());
  }
  const auto s = nlohmann::json::parse(reinterpret_cast<const char*>(b.data()) + 8 + n,
                                       reinterpret_cast<const char*>(b.data()) + b.size());
  for (auto it = s.begin(); it != s.end(); ++it) scalars[it.key()] = it.value();
}
}  // namespace

void Trainer::Impl::save(const std::filesystem::path& dir) const {
  // ZeRO 3: the parameters gathered whole on every rank (collective), in their stored precision;
  // rank 0 writes the same checkpoint as a run without ZeRO (DeepSpeed's
  // stage3_gather_16bit_weights_on_model_save, FSDP's full state dict).
  if (zero3) zero3->gather_all();
  SafeTensorsFile opt_tensors;
  nlohmann::json opt_scalars = nlohmann::json::object();
  detail::save_optimizer_state(*opt, opt_tensors, opt_scalars);
  if (!owner.empty() || zero3) {
    // ZeRO: each rank holds the optimizer state of its parameters (ZeRO 3: of its rows of each);
    // rank 0 gathers them into one file, the same a single process writes (resumable on any
    // number of ranks).
    const std::string mine = serialize_optimizer_shard(opt_tensors, opt_scalars);
    for (int r = 1; r < dp->size(); ++r) {
      std::vector<std::byte> b(mine.size());
      std::memcpy(b.data(), mine.data(), b.size());
      b = dp->broadcast_bytes(std::move(b), r);
      if (is_rank0()) merge_optimizer_shard(b, opt_tensors, opt_scalars, zero3 != nullptr);
    }
  }
  if (!is_rank0()) return;  // the replicas are identical: rank 0 writes for all
  nlohmann::ordered_json state;
  state["format"] = kCheckpointFormat;
  state["version"] = kCheckpointVersion;
  state["step"] = step;
  state["epoch"] = source->epoch();
  state["epoch_position"] = source->position();
  state["skipped_steps"] = skipped;
  state["last_loss"] = std::isfinite(last_loss) ? nlohmann::ordered_json(last_loss) : nullptr;
  state["config"] = nlohmann::ordered_json::parse(config_to_json(cfg));
  // What the data order runs over: a resumed run must load the same training set (checked in
  // resume(); config.data may name a new place for it, docs/train.md "Resuming"). Inside
  // "config" (config_from_json ignores it), so that a single-process state.json keeps its keys.
  if (const std::string fp = source->fingerprint(); !fp.empty()) {
    state["config"]["data_fingerprint"] = {{"data", cfg.data}, {"train", fp}};
  }
  if (dp) state["ranks"] = dp->size();  // absent: one process
  state["data"] = nlohmann::ordered_json::parse(source->state());
  // Every random stream of a run is a pure function of these seeds and counters: model
  // initialization (model seed), data order (sampler seed, epoch, position, or gpt's micro-batch
  // counter, under "data"), and the mask streams of Dropout modules, if the model has any.
  state["rng"] = {{"seed", cfg.seed},
                  {"model_seed", cfg.model.seed},
                  {"dropout", detail::dropout_streams(*model)}};
  state["optimizer"] = {{"name", cfg.optimizer}, {"lr", opt->lr()}, {"state", opt_scalars}};
  nlohmann::ordered_json rs = nlohmann::ordered_json::object();
  for (const auto& [k, v] : recipe->state()) rs[k] = v;
  state["recipe"] = {{"name", recipe->name()}, {"loss_scale", recipe->loss_scale()}, {"state", rs}};
  state["metrics"] = metrics;

  SafeTensorsFile weights = module_state(*model);
  weights.metadata["format"] = kCheckpointFormat;
  weights.metadata["model"] = cfg.model.name;
  if (!cfg.lora.empty())
    weights.metadata[nn::kLoraMetadataKey] = cfg.lora;  // `mixp convert` merges
  opt_tensors.metadata["format"] = kCheckpointFormat;
  opt_tensors.metadata["optimizer"] = cfg.optimizer;
  const std::string text = state.dump(2) + "\n";
  write_directory_atomic(dir, [&](const std::filesystem::path& staging) {
    write_safetensors(staging / kModelFile, weights);
    write_safetensors(staging / kOptimizerFile, opt_tensors);
    recipe->save_extra(*model, staging);
    // A LoRA run's checkpoint also holds its adapters alone, in PEFT's layout (nn/lora_io.h).
    if (!cfg.lora.empty())
      nn::save_lora_adapter(*model, nn::LoraOptions::parse(cfg.lora), staging, cfg.init_from);
    write_text_atomic(staging / kStateFile, text);
    write_folder_manifest(staging);  // last: it names and checksums every file above
  });
}

void Trainer::Impl::resume(const std::filesystem::path& dir) {
  // The folder as check_resume_config read it: one save, verified (a concurrent save into the
  // same folder cannot mix into it).
  std::shared_ptr<const CheckpointFiles> ck = resumed;
  if (!ck || ck->dir() != dir) ck = std::make_shared<const CheckpointFiles>(read_checkpoint(dir));
  resumed.reset();
  const std::string state_file = ck->path(kStateFile).string();
  const nlohmann::json state = nlohmann::json::parse(ck->state_text);  // validated already
  const TrainConfig& saved = ck->config;
  same(dir, "--precision", saved.precision, cfg.precision,
       "the parameters' storage, the optimizer state (master weights) and the loss-scale or FP8 "
       "scaling state belong to the recipe (and its options) it was trained in; the loss scale's "
       "growth interval can change with --growth-interval");
  detail::check_recorded_recipe_name(state_file, state, saved.precision, *recipe);
  const SafeTensorsFile weights = ck->safetensors(kModelFile);
  const SafeTensorsFile opt_tensors = ck->safetensors(kOptimizerFile);
  check_checkpoint_weights(*ck, weights, model.get());  // the run's recipe is the recorded one
  load_module_state(*model, weights, ck->path(kModelFile).string());
  const auto& os = state.at("optimizer");
  std::map<std::string, RowPiece> rows;  // ZeRO 3: this rank's rows of each parameter
  if (zero3) {
    for (size_t k = 0; k < params.size(); ++k) {
      if (zero3->pieces()[k].defined())
        rows[param_names[k]] = row_piece(params[k].shape(), dp->size(), dp->rank());
    }
  }
  detail::load_optimizer_state(*opt, opt_tensors, os.value("state", nlohmann::json::object()),
                               ck->path(kOptimizerFile).string(),
                               /*shard=*/!owner.empty() || zero3, zero3 ? &rows : nullptr);
  // The fields below were type-checked by read_checkpoint; what each loader still finds wrong
  // is reported with the file's name.
  try {
    source->restore(state.at("data").dump());
    if (state.contains("rng") && state["rng"].contains("dropout")) {
      detail::restore_dropout_streams(*model, state["rng"]["dropout"]);
    }
  } catch (const nlohmann::json::exception& e) {
    std::string what = e.what();
    if (auto pos = what.find("] "); pos != std::string::npos) what.erase(0, pos + 2);
    throw TrainError(state_file + ": \"data\" or \"rng\" is malformed (" + what +
                     "); the checkpoint is damaged (or was edited), so it is refused");
  } catch (const TrainError& e) {
    throw TrainError(state_file + ": \"data\": " + e.what());  // the source names no file
  }
  // After restore(), whose error for data of another size says more than the checksums.
  check_resume_data(state, state_file);
  std::map<std::string, double> rs;
  if (state.contains("recipe") && state["recipe"].contains("state")) {
    for (const auto& [k, v] : state["recipe"]["state"].items()) rs[k] = v.get<double>();
  }
  recipe->load_state(rs);
  step = state.at("step").get<int64_t>();
  skipped = state.value("skipped_steps", int64_t(0));
  // The data position must be the one `step` steps reach (docs/train.md, "What is verified on
  // load"): each step takes grad_accum micro-batches, the last one of an epoch what is left.
  const int64_t want_epoch = step / steps_per_epoch;
  const int64_t want_position = (step % steps_per_epoch) * cfg.grad_accum;
  if (source->epoch() != want_epoch || source->position() != want_position ||
      state.at("epoch").get<int64_t>() != want_epoch ||
      state.at("epoch_position").get<int64_t>() != want_position) {
    throw TrainError(fmt::format(
        "{}: \"step\" {} means epoch {} at batch {} ({} steps per epoch, {} batches per step), "
        "but the data position says epoch {} at batch {} (\"epoch\" {}, \"epoch_position\" {}): "
        "the file contradicts itself; the checkpoint is damaged (or was edited), so it is refused",
        state_file, step, want_epoch, want_position, steps_per_epoch, cfg.grad_accum,
        source->epoch(), source->position(), state.at("epoch").get<int64_t>(),
        state.at("epoch_position").get<int64_t>()));
  }
  if (state.contains("last_loss") && state["last_loss"].is_number()) {
    last_loss = state["last_loss"].get<double>();
  }
  if (state.contains("metrics") && state["metrics"].is_object()) {
    const auto& m = state["metrics"];
    if (m.contains("train_time_s") && m["train_time_s"].is_number()) {
      prior_train_time_s = m["train_time_s"].get<double>();
    }
  }
}

}  // namespace mixp::train
