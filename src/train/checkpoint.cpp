#include "mixp/train/checkpoint.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "mixp/amp/fp8_linear.h"
#include "mixp/autograd/grad_mode.h"
#include "mixp/nn/gpt2_weights.h"
#include "mixp/nn/module.h"
#include "mixp/train/recipe.h"
#include "mixp/tensor/factories.h"
#include "tensor_bytes.h"

namespace mixp::train {

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// nlohmann keeps the last of two equal keys silently ("step": 20, "step": 5 would resume at 5).
struct DuplicateKeys {
  std::string source;
  std::vector<std::set<std::string>> keys;
  std::vector<std::string> path;
  bool operator()(int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start) keys.emplace_back();
    if (event == E::object_end) keys.pop_back();
    if (event == E::key) {
      const std::string k = parsed.get<std::string>();
      if (path.size() > size_t(depth)) path.resize(size_t(depth));
      while (path.size() < size_t(depth)) path.emplace_back();
      path.back() = k;
      if (!keys.back().insert(k).second) {
        std::string where;
        for (size_t i = 0; i + 1 < path.size(); ++i) where += path[i] + ".";
        throw TrainError(source + ": the key \"" + where + k +
                         "\" appears twice; the file is ambiguous (edited by hand?), so the "
                         "checkpoint is refused");
      }
    }
    return true;
  }
};

nlohmann::json parse_strict(std::string_view text, const std::string& source) {
  try {
    DuplicateKeys guard{source, {}, {}};
    return nlohmann::json::parse(text.begin(), text.end(), std::ref(guard));
  } catch (const nlohmann::json::exception& e) {
    std::string what = e.what();
    if (auto pos = what.find("] "); pos != std::string::npos) what.erase(0, pos + 2);
    throw TrainError(source + " is not valid JSON (" + what.substr(0, 200) +
                     "); the checkpoint is damaged, save it again");
  }
}

constexpr int64_t kMaxCount = int64_t(1) << 53;  // exact in a double; far beyond any real run

[[noreturn]] void bad_field(const std::string& source, const std::string& field,
                            const nlohmann::json& v, const std::string& want) {
  std::string shown = v.dump();
  if (shown.size() > 60) shown = shown.substr(0, 60) + "...";
  throw TrainError(source + ": \"" + field + "\" is " + shown + ", not " + want +
                   "; the checkpoint is damaged (or was edited), so it is refused");
}

const nlohmann::json& member(const nlohmann::json& j, const std::string& source,
                             const std::string& prefix, const char* key) {
  if (!j.contains(key)) {
    throw TrainError(source + " has no \"" + prefix + key +
                     "\"; the checkpoint is damaged, so it is refused");
  }
  return j[key];
}

int64_t count_field(const nlohmann::json& j, const std::string& source, const std::string& prefix,
                    const char* key) {
  const nlohmann::json& v = member(j, source, prefix, key);
  const std::string want = "a whole number from 0 to 2^53";
  if (!v.is_number_integer()) bad_field(source, prefix + key, v, want);
  if (v.is_number_unsigned() ? v.get<uint64_t>() > uint64_t(kMaxCount)
                             : (v.get<int64_t>() < 0 || v.get<int64_t>() > kMaxCount)) {
    bad_field(source, prefix + key, v, want);
  }
  return v.get<int64_t>();
}

const nlohmann::json& object_field(const nlohmann::json& j, const std::string& source,
                                   const std::string& prefix, const char* key) {
  const nlohmann::json& v = member(j, source, prefix, key);
  if (!v.is_object()) bad_field(source, prefix + key, v, "an object");
  return v;
}

void finite_numbers(const nlohmann::json& obj, const std::string& source,
                    const std::string& prefix) {
  for (const auto& [k, v] : obj.items()) {
    if (!v.is_number() || !std::isfinite(v.get<double>())) {
      bad_field(source, prefix + k, v, "a finite number");
    }
  }
}

}  // namespace

void validate_checkpoint_state(std::string_view text, const std::string& source) {
  const nlohmann::json j = parse_strict(text, source);
  if (!j.is_object() || !j.contains("format") || j["format"] != kCheckpointFormat) {
    throw TrainError(source + " is not a mixp checkpoint state (its \"format\" is not \"" +
                     kCheckpointFormat + "\")");
  }
  const nlohmann::json& ver = j.contains("version") ? j["version"] : nlohmann::json();
  if (!ver.is_number_integer() || ver.get<int64_t>() < 1 ||
      ver.get<int64_t>() > kCheckpointVersion) {
    throw TrainError(source + " has checkpoint version " + ver.dump().substr(0, 40) +
                     "; this mixp reads version " + std::to_string(kCheckpointVersion) +
                     (ver.is_number_integer() && ver.get<int64_t>() > kCheckpointVersion
                          ? ", upgrade mixp to read it"
                          : ": the checkpoint is damaged"));
  }
  const int64_t step = count_field(j, source, "", "step");
  count_field(j, source, "", "epoch");
  count_field(j, source, "", "epoch_position");
  const int64_t skipped = count_field(j, source, "", "skipped_steps");
  if (skipped > step) {
    throw TrainError(fmt::format(
        "{}: \"skipped_steps\" is {} but \"step\" is {}: more steps skipped than taken; the "
        "checkpoint is damaged (or was edited), so it is refused",
        source, skipped, step));
  }
  if (j.contains("last_loss") && !j["last_loss"].is_null() &&
      (!j["last_loss"].is_number() || !std::isfinite(j["last_loss"].get<double>()))) {
    bad_field(source, "last_loss", j["last_loss"], "a finite number or null");
  }
  object_field(j, source, "", "config");
  object_field(j, source, "", "data");
  if (j.contains("rng")) {
    const auto& rng = object_field(j, source, "", "rng");
    if (rng.contains("dropout")) object_field(rng, source, "rng.", "dropout");
  }
  const auto& opt = object_field(j, source, "", "optimizer");
  if (!member(opt, source, "optimizer.", "name").is_string()) {
    bad_field(source, "optimizer.name", opt["name"], "a string");
  }
  const auto& lr = member(opt, source, "optimizer.", "lr");
  if (!lr.is_number() || !std::isfinite(lr.get<double>()) || lr.get<double>() < 0) {
    bad_field(source, "optimizer.lr", lr, "a finite number >= 0");
  }
  if (opt.contains("state")) {
    const auto& st = object_field(opt, source, "optimizer.", "state");
    finite_numbers(st, source, "optimizer.state.");
    // The optimizer counts the steps it applied: every step but the skipped ones.
    if (st.contains("step") && st["step"].get<double>() != double(step - skipped)) {
      throw TrainError(fmt::format(
          "{}: the optimizer's step count \"optimizer.state.step\" is {} but \"step\" {} minus "
          "\"skipped_steps\" {} is {}: the file contradicts itself; the checkpoint is damaged "
          "(or was edited), so it is refused",
          source, st["step"].dump(), step, skipped, step - skipped));
    }
  }
  if (j.contains("recipe")) {
    const auto& rc = object_field(j, source, "", "recipe");
    if (rc.contains("name") && !rc["name"].is_string()) {
      bad_field(source, "recipe.name", rc["name"], "a string");
    }
    if (rc.contains("loss_scale")) {
      const auto& ls = rc["loss_scale"];
      if (!ls.is_number() || !std::isfinite(ls.get<double>()) || !(ls.get<double>() > 0)) {
        bad_field(source, "recipe.loss_scale", ls, "a finite number > 0");
      }
    }
    if (rc.contains("state"))
      finite_numbers(object_field(rc, source, "recipe.", "state"), source, "recipe.state.");
  }
  if (j.contains("metrics")) object_field(j, source, "", "metrics");
}

CheckpointFiles read_checkpoint(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    throw TrainError("checkpoint folder " + dir.string() +
                     " does not exist; give a folder written by `mixp train --save`");
  }
  static const std::vector<std::string> kLegacy = {kStateFile, kModelFile, kOptimizerFile,
                                                   kInt8ModelFile, kPackedModelFile};
  CheckpointFiles out;
  out.folder = read_verified_folder(dir, kLegacy);
  const std::vector<std::byte>* state = out.folder.find(kStateFile);
  if (!state) {
    throw TrainError(dir.string() + " is not a mixp checkpoint: it has no " + kStateFile +
                     "; give a folder written by `mixp train --save`");
  }
  const std::string source = (dir / kStateFile).string();
  out.state_text.assign(reinterpret_cast<const char*>(state->data()), state->size());
  validate_checkpoint_state(out.state_text, source);
  const nlohmann::json j = nlohmann::json::parse(out.state_text);
  try {
    out.config = config_from_json(j["config"].dump());
  } catch (const ConfigError& e) {
    throw TrainError(source + ": " + e.what() + "; the checkpoint is damaged (or was edited)");
  }
  if (j["optimizer"]["name"] != out.config.optimizer) {
    throw TrainError(source + ": \"optimizer.name\" is " + j["optimizer"]["name"].dump() +
                     " but \"config.optimizer\" is \"" + out.config.optimizer +
                     "\": the file contradicts itself; the checkpoint is damaged (or was edited)");
  }
  (void)check_checkpoint_config(out);
  return out;
}

SafeTensorsFile CheckpointFiles::safetensors(std::string_view name) const {
  const std::vector<std::byte>* bytes = folder.find(name);
  if (!bytes) {
    throw TrainError(path(name).string() + " is missing: the checkpoint " + dir().string() +
                     " is incomplete");
  }
  return parse_safetensors(*bytes, path(name).string());
}

bool checkpoint_is_unverified(const std::filesystem::path& dir) {
  std::error_code ec;
  return std::filesystem::is_regular_file(dir / kStateFile, ec) &&
         !std::filesystem::exists(dir / kManifestFile, ec);
}

void seal_checkpoint(const std::filesystem::path& dir) {
  write_folder_manifest(dir);
}

std::string read_checkpoint_state(const std::filesystem::path& dir) {
  return read_checkpoint(dir).state_text;
}

TrainConfig read_checkpoint_config(const std::filesystem::path& dir) {
  return read_checkpoint(dir).config;
}

SafeTensorsFile module_state(const nn::Module& model) {
  // state_dict(): parameters then buffers, own dtypes; a gpt2's vocabulary and heads as metadata.
  SafeTensorsFile f = nn::to_safetensors(model);
  nn::add_gpt2_metadata(model, f);
  return f;
}

void load_module_state(nn::Module& model, const SafeTensorsFile& file, std::string_view source) {
  std::map<std::string, const SafeTensor*, std::less<>> stored;
  for (const auto& t : file.tensors) stored[t.name] = &t;
  std::vector<std::pair<std::string, Tensor>> targets = model.named_parameters();
  for (auto& b : model.named_buffers()) targets.push_back(b);
  bool model_has_fp8_state = false;
  for (const auto& tg : targets) model_has_fp8_state |= amp::is_fp8_state_name(tg.first);

  // Check everything before changing anything, so a mismatch leaves the model as it was.
  for (const auto& [name, t] : targets) {
    const bool fp8 = amp::is_fp8_state_name(name);
    auto it = stored.find(name);
    if (it == stored.end()) {
      if (fp8) {
        throw TrainError(std::string(source) + " has no FP8 scaling state '" + name + "' (shape " +
                         t.shape().str() +
                         ") that the model needs: the checkpoint was not trained with FP8 "
                         "delayed scaling on this layer (precision fp8 and the same "
                         "--layer-precision); fp8-current and mxfp8 keep no state");
      }
      throw TrainError(std::string(source) + " has no tensor '" + name + "' (shape " +
                       t.shape().str() +
                       ") that the model needs; the checkpoint belongs to a different model or "
                       "model shape (--width, --layers, ...)");
    }
    if (it->second->shape != detail::dims(t.shape())) {
      if (fp8) {
        throw TrainError(std::string(source) + ": FP8 scaling state '" + name + "' has shape " +
                         shape_str(it->second->shape) + " but the model's is " + t.shape().str() +
                         "; the checkpoint was trained with another amax history length "
                         "(precision 'fp8:amax_history=N'; the default is 16 since issue 28, "
                         "'fp8:preset=te' is TransformerEngine's 1024)");
      }
      throw TrainError(std::string(source) + ": tensor '" + name + "' has shape " +
                       shape_str(it->second->shape) + " but the model's is " + t.shape().str() +
                       "; the checkpoint belongs to a different model shape");
    }
  }
  if (stored.size() != targets.size()) {
    for (const auto& [name, st] : stored) {
      bool known = false;
      for (const auto& tg : targets) known = known || tg.first == name;
      if (known) continue;
      // A model without FP8 state (evaluated in another precision) ignores the checkpoint's:
      // it is the recipe's state, not a weight.
      if (amp::is_fp8_state_name(name) && !model_has_fp8_state) continue;
      if (amp::is_fp8_state_name(name)) {
        throw TrainError(std::string(source) + " has FP8 scaling state '" + name +
                         "' for a layer that does not run in FP8 delayed scaling in this model; "
                         "the checkpoint was trained with another --layer-precision");
      }
      throw TrainError(std::string(source) + " has a tensor '" + name + "' (shape " +
                       shape_str(st->shape) +
                       ") that the model does not have; the checkpoint belongs to a different "
                       "model or model shape");
    }
  }
  for (const auto& [name, t] : targets) {
    detail::check_loaded_tensor(t, *stored.find(name)->second, source, "tensor");
  }
  NoGradGuard ng;
  for (auto& [name, t] : targets) nn::copy_from_safetensor(t, *stored.find(name)->second);
}

}  // namespace mixp::train
