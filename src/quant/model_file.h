// What the quantized-model files share (internal): the int8 model (int8_io.cpp) and the packed
// low-bit model (lowbit_io.cpp) are both safetensors files whose layers are described by a JSON
// document in the metadata, and both refuse a damaged file with one kind of message.
#pragma once
#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mixp/io/safetensors.h"

namespace mixp::quant::detail {

// A file's description for messages: "int8 model", "packed model".
[[noreturn]] inline void bad_model_file(const std::filesystem::path& path, const char* kind,
                                        const std::string& what) {
  throw SafeTensorsError(fmt::format("{}: not a valid mixp {}: {}", path.string(), kind, what));
}

// A tensor of `bytes` bytes copied from `data`.
inline SafeTensor make_tensor(const std::string& name, DType dt, std::vector<int64_t> shape,
                              const void* data, size_t bytes) {
  SafeTensor s;
  s.name = name;
  s.dtype = dt;
  s.shape = std::move(shape);
  s.data.resize(bytes);
  if (bytes) std::memcpy(s.data.data(), data, bytes);
  return s;
}

// The tensor `name`, of dtype `dt` and `numel` values (any number when negative), or the error.
inline const SafeTensor& need_tensor(const SafeTensorsFile& f, const std::filesystem::path& path,
                                     const char* kind, const std::string& name, DType dt,
                                     int64_t numel) {
  const SafeTensor* t = f.find(name);
  if (!t) bad_model_file(path, kind, "tensor '" + name + "' is missing");
  if (t->dtype != dt) {
    bad_model_file(path, kind,
                   fmt::format("tensor '{}' is {}, expected {}", name, mixp::name(t->dtype),
                               mixp::name(dt)));
  }
  if (numel >= 0 && t->numel() != numel) {
    bad_model_file(path, kind,
                   fmt::format("tensor '{}' has {} values, expected {}", name, t->numel(), numel));
  }
  return *t;
}

// The layer description under metadata key `key`, checked to be of `format` and no newer than
// `version`.
inline nlohmann::json read_model_meta(const SafeTensorsFile& f, const std::filesystem::path& path,
                                      const char* kind, const char* key, const char* format,
                                      int version) {
  const auto it = f.metadata.find(key);
  if (it == f.metadata.end()) bad_model_file(path, kind, std::string("no '") + key + "' metadata");
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(it->second);
  } catch (const nlohmann::json::exception& e) {
    bad_model_file(path, kind, std::string("metadata is not JSON: ") + e.what());
  }
  if (meta.value("format", "") != format) {
    bad_model_file(path, kind, std::string("metadata format is not ") + format);
  }
  if (meta.value("version", 0) > version) {
    bad_model_file(path, kind,
                   fmt::format("version {} is newer than this mixp reads ({})",
                               meta.value("version", 0), version));
  }
  return meta;
}

}  // namespace mixp::quant::detail
