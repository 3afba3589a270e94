// Saving and loading a module, and converting it to another dtype (after PyTorch's
// torch.save(model.state_dict()) / model.load_state_dict(torch.load(...)) and model.to(dtype), in
// the safetensors layout Hugging Face uses).
//
//   nn::save(model, "model.safetensors");                       // each tensor in its own dtype
//   nn::save(model, "model-bf16.safetensors", {.dtype = DType::bf16});  // half the bytes
//   nn::load(other, "model.safetensors");                       // names and shapes checked first
//   nn::convert_module(model, DType::bf16);                     // model.to(torch.bfloat16)
//
// The file holds Module::state_dict(): parameters then buffers under their dotted names
// ("fc1.weight", "blocks.0.attn.qkv.bias"), so a file written by PyTorch's
// safetensors.torch.save_file(model.state_dict()) loads when the names match, and ours loads
// there. Writing is atomic (io/safetensors.h): a failed save leaves no file and an existing one
// unchanged. Checkpoints of whole training runs (optimizer, data position, recipe state) are
// train/checkpoint.h's; this is the module alone.
#pragma once
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "mixp/io/safetensors.h"
#include "mixp/nn/module.h"

namespace mixp::nn {

struct SaveOptions {
  // Floating tensors are stored in this dtype (nearest-even); integer ones keep theirs. Unset:
  // every tensor in its own dtype (bit-exact).
  std::optional<DType> dtype;
  std::map<std::string, std::string> metadata;  // the file's "__metadata__"
};

struct LoadOptions {
  // Entries in the file that the model does not have are an error (PyTorch's strict=True).
  // Missing entries and shape mismatches always are.
  bool strict = true;
};

// One tensor as a safetensors entry: a contiguous copy of its elements, in its own dtype.
SafeTensor to_safetensor(const std::string& name, const Tensor& t);
// Copies `s` into `t` (the same shape; checked by the caller). The same dtype is copied byte for
// byte (a bit-exact resume); another floating dtype is converted with nearest-even.
void copy_from_safetensor(Tensor& t, const SafeTensor& s);

// The module's state_dict() as safetensors entries (contiguous copies, dtype per `opt`).
SafeTensorsFile to_safetensors(const Module& model, const SaveOptions& opt = {});
// Copies `file`'s tensors into the module: every name and shape is checked before anything
// changes; another floating dtype is converted with nearest-even, the same dtype is copied byte
// for byte. Throws std::invalid_argument naming `source`, the tensor and both shapes.
void load_safetensors(Module& model, const SafeTensorsFile& file, const std::string& source,
                      const LoadOptions& opt = {});

// Writes to_safetensors(model, opt) to `path`. Throws IoError (mixp/io/atomic_file.h).
void save(const Module& model, const std::filesystem::path& path, const SaveOptions& opt = {});
// Reads `path` and load_safetensors. Throws IoError, SafeTensorsError, std::invalid_argument.
void load(Module& model, const std::filesystem::path& path, const LoadOptions& opt = {});

// Converts every floating parameter and buffer of `model` to `dtype` in place, nearest-even.
// The tensors keep their identity (TensorImpl), so handles held elsewhere (an optimizer's, a
// layer's) see the change; their .grad is dropped. Integer buffers are left alone.
void convert_module(Module& model, DType dtype);
// The same for one tensor (a no-op for undefined, non-floating or already-`dtype` tensors).
void convert_tensor_in_place(Tensor& t, DType dtype);

}  // namespace mixp::nn
