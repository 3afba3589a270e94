#include "mixp/nn/serialize.h"

#include <fmt/format.h>

#include <cstring>
#include <stdexcept>

#include "mixp/autograd/grad_mode.h"
#include "mixp/tensor/factories.h"

namespace mixp::nn {

SafeTensor to_safetensor(const std::string& name, const Tensor& t) {
  NoGradGuard ng;
  const Tensor c = t.detach().contiguous().to(Device::cpu());  // host copy for the file
  SafeTensor s;
  s.name = name;
  s.dtype = c.dtype();
  s.shape.assign(c.shape().begin(), c.shape().end());
  s.data.resize(c.nbytes());
  if (c.nbytes()) std::memcpy(s.data.data(), c.data_ptr(), c.nbytes());
  return s;
}

void copy_from_safetensor(Tensor& t, const SafeTensor& s) {
  NoGradGuard ng;
  Tensor dst = t.detach();
  if (s.dtype == dst.dtype() && dst.is_contiguous() && dst.device().is_cpu()) {
    if (s.data.size() != dst.nbytes()) {
      throw std::logic_error("copy_from_safetensor: size mismatch for " + s.name);
    }
    if (!s.data.empty()) std::memcpy(dst.data_ptr(), s.data.data(), s.data.size());
    dst.bump_version();  // a raw write (Storage::version): copies of the old values are stale
    return;
  }
  // from_blob only wraps the bytes for the duration of the converting copy.
  const Tensor src = from_blob(const_cast<std::byte*>(s.data.data()),
                               Shape(s.shape.begin(), s.shape.end()), s.dtype);
  dst.copy_(src);
}

SafeTensorsFile to_safetensors(const Module& model, const SaveOptions& opt) {
  NoGradGuard ng;
  SafeTensorsFile f;
  f.metadata = opt.metadata;
  for (const auto& [name, t] : model.state_dict()) {
    const bool convert = opt.dtype && t.is_floating_point() && t.dtype() != *opt.dtype;
    f.tensors.push_back(
        to_safetensor(name, convert ? t.detach().to(*opt.dtype, Round::nearest_even) : t));
  }
  return f;
}

void load_safetensors(Module& model, const SafeTensorsFile& file, const std::string& source,
                      const LoadOptions& opt) {
  // Wrap the file's bytes (no copy) and let Module::load_state_dict check names and shapes
  // before it copies anything; its messages gain the file's name.
  NamedTensors state;
  for (const SafeTensor& s : file.tensors) {
    if (s.name == "__metadata__") continue;
    state.emplace_back(s.name, from_blob(const_cast<std::byte*>(s.data.data()),
                                         Shape(s.shape.begin(), s.shape.end()), s.dtype));
  }
  try {
    model.load_state_dict(state, opt.strict);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("{}: {}", source, e.what()));
  }
}

void save(const Module& model, const std::filesystem::path& path, const SaveOptions& opt) {
  write_safetensors(path, to_safetensors(model, opt));
}

void load(Module& model, const std::filesystem::path& path, const LoadOptions& opt) {
  load_safetensors(model, read_safetensors(path), path.string(), opt);
}

void convert_tensor_in_place(Tensor& t, DType dtype) {
  if (!t.defined() || !t.is_floating_point() || t.dtype() == dtype) return;
  Tensor c;
  {
    NoGradGuard ng;
    c = t.detach().to(dtype, Round::nearest_even).contiguous();
  }
  // Swap the storage under the same TensorImpl: every handle to this tensor sees the new dtype.
  TensorImpl* impl = t.impl();
  impl->storage = c.impl()->storage;
  impl->offset = c.impl()->offset;
  impl->shape = c.impl()->shape;
  impl->strides = c.impl()->strides;
  impl->dtype = dtype;
  impl->grad.reset();
}

void convert_module(Module& model, DType dtype) {
  for (auto& [name, p] : model.named_parameters()) convert_tensor_in_place(p, dtype);
  for (auto& [name, b] : model.named_buffers()) convert_tensor_in_place(b, dtype);
}

}  // namespace mixp::nn
