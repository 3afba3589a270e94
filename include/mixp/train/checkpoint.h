// Checkpoint folders. A checkpoint is a directory written atomically (io/atomic_file.h's
// AtomicDirectory: it appears complete or not at all) holding
//
//   model.safetensors      parameters and buffers, named as Module::named_parameters() and
//                          named_buffers() name them, in their own dtype
//   optimizer.safetensors  the optimizer's state tensors (e.g. "0.exp_avg": state of parameter 0)
//   state.json             {"format": "mixp-checkpoint", "version": 1, "step", "epoch", "config",
//                           "data" (sampler state), "rng", "optimizer" (scalars), "recipe",
//                           "metrics" (so far), ...}
//
// The JSON keeps every number exactly (integers as integers, doubles in shortest round-trip form),
// which is what makes resuming bit-identical.
#pragma once
#include <filesystem>
#include <string>
#include <string_view>

#include "mixp/io/safetensors.h"
#include "mixp/train/train_config.h"

namespace mixp::nn {
class Module;
}

namespace mixp::train {

inline constexpr const char* kModelFile = "model.safetensors";
inline constexpr const char* kOptimizerFile = "optimizer.safetensors";
inline constexpr const char* kStateFile = "state.json";
// The int8 model of a checkpoint trained with int8-qat, or written by `mixp quantize`
// (quant/int8_model.h); `mixp eval` runs it when present.
inline constexpr const char* kInt8ModelFile = "int8_model.safetensors";
inline constexpr const char* kCheckpointFormat = "mixp-checkpoint";
inline constexpr int kCheckpointVersion = 1;

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
// checkpoint can be evaluated in fp32.
void load_module_state(nn::Module& model, const SafeTensorsFile& file, std::string_view source);

}  // namespace mixp::train
