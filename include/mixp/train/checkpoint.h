// Checkpoint folders. A checkpoint is a directory written atomically (io/atomic_file.h's
// AtomicDirectory: it appears complete or not at all) holding
//
//   model.safetensors      parameters and buffers, named as Module::named_parameters() and
//                          named_buffers() name them, in their own dtype
//   optimizer.safetensors  the optimizer's state tensors (e.g. "0.exp_avg": state of parameter 0)
//   state.json             {"format": "mixp-checkpoint", "version": 1, "step", "epoch", "config",
//                           "data" (sampler state), "rng", "optimizer" (scalars), "recipe",
//                           "metrics" (so far), ...}; "config" also holds "data_fingerprint"
//                          ({"data", "train": checksum of the training set}: a resume must load
//                          the same data, checkpoint_recipe.cpp)
//
//   manifest.json          written last: every other file with its size and CRC-32, and every
//                          tensor of the .safetensors files with dtype, shape and CRC-32
//                          (io/manifest.h)
//
// The JSON keeps every number exactly (integers as integers, doubles in shortest round-trip form),
// which is what makes resuming bit-identical.
//
// Reading (docs/train.md, "What is verified on load"): read_checkpoint reads the folder once
// through one directory handle and verifies every file against the manifest, so a reader never
// mixes two saves, even while another process saves into the same folder; state.json is parsed
// strictly (a key twice in one object is refused) and every field is type- and range-checked,
// naming the field; load_module_state and the optimizer's loader refuse a tensor of the wrong
// dtype class or shape and any NaN or infinity in weights and optimizer state, blaming the
// checkpoint. A folder without manifest.json (written before mixp had manifests) is read
// unverified; checkpoint_is_unverified lets the CLI warn about it.
#pragma once
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "mixp/io/manifest.h"
#include "mixp/io/safetensors.h"
#include "mixp/train/train_config.h"

namespace mixp::nn {
class Module;
}

namespace mixp::train {

class PrecisionRecipe;

inline constexpr const char* kModelFile = "model.safetensors";
inline constexpr const char* kOptimizerFile = "optimizer.safetensors";
inline constexpr const char* kStateFile = "state.json";
// The int8 model of a checkpoint trained with int8-qat, or written by `mixp quantize`
// (quant/int8_model.h); `mixp eval` runs it when present.
inline constexpr const char* kInt8ModelFile = "int8_model.safetensors";
// The packed model of a checkpoint trained with a low-bit recipe (int4-qat, int2-qat, ternary,
// binary, binary-act; quant/lowbit_model.h); `mixp eval` runs it when present.
inline constexpr const char* kPackedModelFile = "packed_model.safetensors";
inline constexpr const char* kCheckpointFormat = "mixp-checkpoint";
inline constexpr int kCheckpointVersion = 1;

// A checkpoint folder read once and verified (see the top of this file).
struct CheckpointFiles {
  VerifiedFolder folder;
  std::string state_text;  // state.json, validated (validate_checkpoint_state)
  TrainConfig config;      // state.json's "config"
  const std::filesystem::path& dir() const { return folder.dir; }
  bool verified() const { return folder.has_manifest; }
  bool has(std::string_view name) const { return folder.find(name) != nullptr; }
  std::filesystem::path path(std::string_view name) const { return folder.path(name); }
  // The .safetensors file `name` of the folder, parsed. TrainError naming the file when the
  // checkpoint has no such file; SafeTensorsError (naming it) when it is malformed.
  SafeTensorsFile safetensors(std::string_view name) const;
};

// Reads and verifies `dir`. Throws TrainError naming the folder or file when it is not a mixp
// checkpoint, IntegrityError (io/manifest.h) when a file does not match the manifest, IoError
// when it cannot be read.
CheckpointFiles read_checkpoint(const std::filesystem::path& dir);
// True when `dir` holds a state.json but no manifest.json: a checkpoint written before mixp had
// manifests, read unverified (the CLI warns).
bool checkpoint_is_unverified(const std::filesystem::path& dir);
// Rewrites `dir/manifest.json` for the files the folder holds now: for a checkpoint changed on
// purpose (a tool that re-encodes model.safetensors, a test). Everything else still applies.
void seal_checkpoint(const std::filesystem::path& dir);
// Checks state.json's fields (types, ranges, and the step against the skipped steps); throws
// TrainError "<source>: \"step\" is 1e+300, not ..." naming the field.
void validate_checkpoint_state(std::string_view text, const std::string& source);

// The recorded configuration against itself (read_checkpoint calls it): a model mixp builds and
// that model.safetensors was saved from ("model" metadata), a configuration TrainConfig::resolved
// accepts, "config.batch" the batch of the saved data order, a "config.precision" and
// "config.layer_precision" that make a recipe, and that recipe's name the one "recipe.name"
// records. Throws TrainError naming state.json and the field. Returns the recorded recipe.
std::unique_ptr<PrecisionRecipe> check_checkpoint_config(const CheckpointFiles& ck);
// The weights against the recorded recipe, before they are loaded (every load path: resume,
// mixp eval, mixp quantize): each floating tensor of `weights` (ck's model.safetensors) must have
// the dtype that the recipe of state.json stores it in, else TrainError naming the file, the
// tensor, the dtype found and the recipe's. `prepared` is a model that recipe built and prepared
// (the run's own when it runs in that recipe); null builds one for the check.
void check_checkpoint_weights(const CheckpointFiles& ck, const SafeTensorsFile& weights,
                              const nn::Module* prepared);

// The run configuration stored in `dir/state.json`. Throws TrainError when `dir` is not a mixp
// checkpoint (missing folder or file, wrong format tag, newer version), naming what is missing.
TrainConfig read_checkpoint_config(const std::filesystem::path& dir);
// The whole state.json text (after the same checks).
std::string read_checkpoint_state(const std::filesystem::path& dir);

// The module's parameters then buffers as safetensors entries (copied, contiguous).
SafeTensorsFile module_state(const nn::Module& model);
// Copies `file`'s tensors into the module. Every parameter and buffer must be present with the
// same shape, and the file may hold nothing else; otherwise TrainError names the tensor, both
// shapes, and `source`. A different floating dtype is converted (nearest-even), so an fp64
// checkpoint can be evaluated in fp32; a floating parameter or buffer from an integer tensor (or
// the reverse) is refused, and so is a NaN or infinity in a floating tensor.
void load_module_state(nn::Module& model, const SafeTensorsFile& file, std::string_view source);

}  // namespace mixp::train
