#include "mixp/train/checkpoint.h"

#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "mixp/amp/fp8_linear.h"
#include "mixp/autograd/grad_mode.h"
#include "mixp/nn/module.h"
#include "mixp/tensor/factories.h"
#include "tensor_bytes.h"

namespace mixp::train {

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::string read_checkpoint_state(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    throw TrainError("checkpoint folder " + dir.string() +
                     " does not exist; give a folder written by `mixp train --save`");
  }
  const auto state = dir / kStateFile;
  if (!std::filesystem::is_regular_file(state, ec)) {
    throw TrainError(dir.string() + " is not a mixp checkpoint: it has no " + kStateFile +
                     "; give a folder written by `mixp train --save`");
  }
  std::string text = read_text(state);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw TrainError(state.string() + " is not valid JSON (" + e.what() +
                     "); the checkpoint is damaged, save it again");
  }
  if (!j.is_object() || j.value("format", "") != kCheckpointFormat) {
    throw TrainError(state.string() + " is not a mixp checkpoint state (its \"format\" is not \"" +
                     kCheckpointFormat + "\")");
  }
  const int version = j.value("version", 0);
  if (version < 1 || version > kCheckpointVersion) {
    throw TrainError(state.string() + " has checkpoint version " + std::to_string(version) +
                     "; this mixp reads version " + std::to_string(kCheckpointVersion) +
                     ", upgrade mixp to read it");
  }
  return text;
}

TrainConfig read_checkpoint_config(const std::filesystem::path& dir) {
  const nlohmann::json j = nlohmann::json::parse(read_checkpoint_state(dir));
  if (!j.contains("config")) {
    throw TrainError((dir / kStateFile).string() + " has no \"config\"; the checkpoint is damaged");
  }
  return config_from_json(j["config"].dump());
}

SafeTensorsFile module_state(const nn::Module& model) {
  auto& m = const_cast<nn::Module&>(model);  // named_* only read the module
  SafeTensorsFile f;
  for (const auto& [name, t] : m.named_parameters())
    f.tensors.push_back(detail::to_safetensor(name, t));
  for (const auto& [name, t] : m.named_buffers())
    f.tensors.push_back(detail::to_safetensor(name, t));
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
        throw TrainError(std::string(source) + " has no FP8 scaling state '" + name +
                         "' (shape " + t.shape().str() +
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
                         "(precision 'fp8:amax_history=N')");
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
  NoGradGuard ng;
  for (auto& [name, t] : targets) detail::copy_from_safetensor(t, *stored.find(name)->second);
}

}  // namespace mixp::train
