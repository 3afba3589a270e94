// Block tensors in .safetensors files; see include/mixp/io/quantized_safetensors.h.
#include "mixp/io/quantized_safetensors.h"

#include <bit>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "io/block_file_util.h"
#include "mixp/format/convert.h"
#include "mixp/format/float_codec.h"
#include "mixp/io/block_scaled_safetensors.h"

namespace mixp {
namespace {

using detail::to_bytes;
using nlohmann::json;

[[noreturn]] void fail(std::string_view name, const std::string& what) {
  throw SafeTensorsError("block tensor '" + std::string(name) + "': " + what);
}

const SafeTensor& companion(const SafeTensorsFile& file, std::string_view name,
                            const std::string& full, DType want) {
  const SafeTensor* t = file.find(full);
  if (!t) fail(name, "its tensor '" + full + "' is missing");
  if (t->dtype != want) {
    fail(name, "'" + full + "' has dtype " + std::string(traits(t->dtype).safetensors) +
                   ", expected " + std::string(traits(want).safetensors));
  }
  return *t;
}

}  // namespace

void add_block_tensor(SafeTensorsFile& file, const std::string& name, const BlockTensor& t,
                      std::string_view source_dtype) {
  const std::string scale_name = name + ".scale", zp_name = name + ".zero_point";
  for (const std::string& n : {name, scale_name, zp_name}) {
    if (file.find(n))
      throw SafeTensorsError("cannot store block tensor '" + name + "': a tensor '" + n +
                             "' exists");
  }
  if (file.metadata.count(detail::block_metadata_key(name))) {
    throw SafeTensorsError("cannot store block tensor '" + name + "': metadata key '" +
                           detail::block_metadata_key(name) + "' exists");
  }
  file.tensors.push_back(
      {name, DType::uint8, {static_cast<int64_t>(t.data.size())}, to_bytes(t.data)});
  // e8m0 scales have no safetensors dtype: they travel as their raw bytes in a U8 tensor.
  const DType scale_st = t.scale_dtype == DType::e8m0 ? DType::uint8 : t.scale_dtype;
  file.tensors.push_back({scale_name, scale_st, block_scale_shape(t), to_bytes(t.scales)});
  if (!t.zero_points.empty()) {
    file.tensors.push_back({zp_name,
                            DType::int32,
                            {static_cast<int64_t>(t.zero_points.size())},
                            to_bytes(t.zero_points)});
  }
  nlohmann::ordered_json d = {{"scheme", t.scheme},
                              {"shape", t.shape},
                              {"block", t.block_size},
                              {"element", std::string(traits(t.element).name)},
                              {"scale_dtype", std::string(traits(t.scale_dtype).name)}};
  if (!source_dtype.empty()) d["source_dtype"] = std::string(source_dtype);
  file.metadata[detail::block_metadata_key(name)] = d.dump();
}

namespace {
// nlohmann's message without its "[json.exception.type_error.302] " tag, which means nothing to a
// user.
std::string json_what(const json::exception& e) {
  std::string what = e.what();
  if (auto pos = what.find("] ");
      what.rfind("[json.exception", 0) == 0 && pos != std::string::npos) {
    what.erase(0, pos + 2);
  }
  return what;
}
}  // namespace

bool is_block_tensor(const SafeTensorsFile& file, std::string_view name) {
  return file.metadata.count(detail::block_metadata_key(name)) != 0;
}

BlockTensor get_block_tensor(const SafeTensorsFile& file, std::string_view name) {
  if (is_block_scaled_tensor(file, name)) {  // nvfp4, fp8-block (block_scaled_safetensors.h)
    fail(name, "is stored in the " +
                   std::string(to_string(get_block_scaled_tensor(file, name).scheme)) +
                   " training layout, which only decodes to fp32 (read_tensor_f32, mixp convert "
                   "--to fp32)");
  }
  const auto it = file.metadata.find(detail::block_metadata_key(name));
  if (it == file.metadata.end())
    fail(name, "no metadata entry '" + detail::block_metadata_key(name) + "'");
  json d;
  try {
    d = json::parse(it->second);
  } catch (const json::exception& e) {
    fail(name,
         "metadata '" + detail::block_metadata_key(name) + "' is not JSON (" + json_what(e) + ")");
  }
  BlockTensor t;
  try {
    t.scheme = d.at("scheme").get<std::string>();
    t.shape = d.at("shape").get<std::vector<int64_t>>();
    t.block_size = d.at("block").get<int>();
    const std::string element = d.at("element").get<std::string>();
    const std::string scale = d.at("scale_dtype").get<std::string>();
    const auto el = find_dtype(element), sc = find_dtype(scale);
    if (!el) fail(name, "unknown element type '" + element + "'");
    if (!sc || (*sc != DType::e8m0 && *sc != DType::fp32))
      fail(name, "unknown scale type '" + scale + "'");
    t.element = *el;
    t.scale_dtype = *sc;
  } catch (const json::exception& e) {
    fail(name, "metadata '" + detail::block_metadata_key(name) +
                   "' lacks a field or has a wrong type (" + json_what(e) + ")");
  }
  if (!is_block_scheme(t.scheme)) fail(name, "unknown scheme '" + t.scheme + "'");
  const std::string n(name);
  const SafeTensor& data = companion(file, name, n, DType::uint8);
  t.data.resize(data.data.size());
  if (!t.data.empty()) std::memcpy(t.data.data(), data.data.data(), t.data.size());
  const SafeTensor& scales = companion(file, name, n + ".scale",
                                       t.scale_dtype == DType::e8m0 ? DType::uint8 : DType::fp32);
  t.scales.resize(scales.data.size());
  if (!t.scales.empty()) std::memcpy(t.scales.data(), scales.data.data(), t.scales.size());
  if (file.find(n + ".zero_point")) {
    const SafeTensor& zp = companion(file, name, n + ".zero_point", DType::int32);
    t.zero_points.resize(zp.data.size() / 4);
    if (!t.zero_points.empty()) std::memcpy(t.zero_points.data(), zp.data.data(), zp.data.size());
  }
  return t;
}

std::vector<std::string> logical_tensor_names(const SafeTensorsFile& file) {
  std::set<std::string> companions;
  for (const SafeTensor& t : file.tensors) {
    if (is_block_tensor(file, t.name)) {
      companions.insert(t.name + ".scale");
      companions.insert(t.name + ".zero_point");
      for (std::string_view c : kBlockScaledCompanions) companions.insert(t.name + std::string(c));
    }
  }
  std::vector<std::string> out;
  for (const SafeTensor& t : file.tensors) {
    if (!companions.count(t.name)) out.push_back(t.name);
  }
  return out;
}

std::vector<float> read_tensor_f32(const SafeTensorsFile& file, std::string_view name,
                                   std::vector<int64_t>* shape) {
  const SafeTensor* t = file.find(name);
  if (!t) throw SafeTensorsError("no tensor '" + std::string(name) + "' in the file");
  if (is_block_scaled_tensor(file, name)) {  // nvfp4, fp8-block (block_scaled_safetensors.h)
    const BlockScaledTensor q = get_block_scaled_tensor(file, name);
    std::vector<float> out(static_cast<size_t>(q.rows * q.cols));
    block_scaled_dequantize(q, out);
    if (shape) *shape = {q.rows, q.cols};
    return out;
  }
  if (is_block_tensor(file, name)) {
    const BlockTensor b = get_block_tensor(file, name);
    std::vector<float> out(static_cast<size_t>(shape_numel(b.shape)));
    try {
      dequantize_block(b, out);
    } catch (const std::invalid_argument& e) {
      fail(name, e.what());
    }
    if (shape) *shape = b.shape;
    return out;
  }
  const size_t n = static_cast<size_t>(t->numel());
  std::vector<float> out(n);
  const std::byte* p = t->data.data();
  const auto read = [p]<class T>(size_t i, T) {
    T v;
    std::memcpy(&v, p + i * sizeof(T), sizeof(T));
    return v;
  };
  switch (t->dtype) {
    case DType::fp64:
      for (size_t i = 0; i < n; ++i) {  // rounded to nearest even, whatever the FPU's mode
        out[i] = std::bit_cast<float>(encode_float(kFp32, read(i, double{}), Round::nearest_even,
                                                   Overflow::ieee, 0, nullptr));
      }
      break;
    case DType::fp32:
    case DType::bf16:
    case DType::fp16:
    case DType::fp8_e4m3:
    case DType::fp8_e5m2:
      convert_to_f32(t->dtype, p, out);
      break;
    case DType::int8:
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(read(i, int8_t{}));
      break;
    case DType::uint8:
    case DType::boolean:
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(read(i, uint8_t{}));
      break;
    case DType::int32:
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(read(i, int32_t{}));
      break;
    case DType::int64:
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(read(i, int64_t{}));
      break;
    default:
      throw SafeTensorsError("tensor '" + std::string(name) + "' has dtype " +
                             std::string(traits(t->dtype).name) + ", which cannot be read as fp32");
  }
  if (shape) *shape = t->shape;
  return out;
}

}  // namespace mixp
