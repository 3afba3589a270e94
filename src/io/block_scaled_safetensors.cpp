// Block-scaled tensors in .safetensors files; see include/mixp/io/block_scaled_safetensors.h.
#include "mixp/io/block_scaled_safetensors.h"

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>

#include "io/block_file_util.h"
#include "mixp/format/float_codec.h"
#include "mixp/io/quantized_safetensors.h"

namespace mixp {
namespace {

using detail::to_bytes;
using nlohmann::json;

[[noreturn]] void fail(std::string_view name, const std::string& what) {
  throw SafeTensorsError("block-scaled tensor '" + std::string(name) + "': " + what);
}

// The description, or nullopt when `name` has none or it is not JSON of this layout's schemes
// (get_block_scaled_tensor reports the details).
std::optional<json> description(const SafeTensorsFile& file, std::string_view name) {
  const auto it = file.metadata.find(detail::block_metadata_key(name));
  if (it == file.metadata.end()) return std::nullopt;
  json d = json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  if (!d.is_object() || !d.contains("scheme") || !d["scheme"].is_string() ||
      !is_block_scaled_file_scheme(d["scheme"].get<std::string>()))
    return std::nullopt;
  return d;
}

const SafeTensor& companion(const SafeTensorsFile& file, std::string_view name,
                            const std::string& full, DType want, int64_t numel) {
  const SafeTensor* t = file.find(full);
  if (!t) fail(name, "its tensor '" + full + "' is missing");
  if (t->dtype != want)
    fail(name, "'" + full + "' has dtype " + std::string(traits(t->dtype).safetensors) +
                   ", expected " + std::string(traits(want).safetensors));
  if (t->numel() != numel)
    fail(name, "'" + full + "' holds " + std::to_string(t->numel()) + " values, expected " +
                   std::to_string(numel) + " (truncated or corrupt)");
  return *t;
}

}  // namespace

bool is_block_scaled_file_scheme(std::string_view scheme) {
  return scheme == "nvfp4" || scheme == "fp8-block";
}

void add_block_scaled_tensor(SafeTensorsFile& file, const std::string& name,
                             const BlockScaledTensor& q, bool pow2_scales,
                             std::string_view source_dtype) {
  if (q.scheme == BlockScheme::mxfp4)
    throw std::invalid_argument("mxfp4 is stored as an MX block tensor (to_mx_block_tensor)");
  const bool fp4 = q.scheme == BlockScheme::nvfp4;
  std::vector<std::string> names = {name, name + ".scale"};
  if (fp4) names.push_back(name + ".amax");
  for (const std::string& n : names) {
    if (file.find(n))
      throw SafeTensorsError("cannot store block-scaled tensor '" + name + "': a tensor '" + n +
                             "' exists");
  }
  if (file.metadata.count(detail::block_metadata_key(name)))
    throw SafeTensorsError("cannot store block-scaled tensor '" + name + "': metadata key '" +
                           detail::block_metadata_key(name) + "' exists");
  const std::vector<int64_t> grid = {q.tile_grid_rows(), q.tile_grid_cols()};
  if (fp4) {
    std::vector<uint8_t> packed((q.codes.size() + 1) / 2, 0);
    for (size_t i = 0; i < q.codes.size(); ++i)  // element 2i low nibble (block_tensor.h mxfp4)
      packed[i / 2] |= static_cast<uint8_t>((q.codes[i] & 0xF) << (4 * (i % 2)));
    file.tensors.push_back(
        {name, DType::uint8, {static_cast<int64_t>(packed.size())}, to_bytes(packed)});
    file.tensors.push_back({name + ".scale", DType::uint8, grid, to_bytes(q.scale_codes)});
    file.tensors.push_back(
        {name + ".amax", DType::fp32, {1}, to_bytes(std::vector<float>{q.global_amax})});
  } else {
    file.tensors.push_back(
        {name, DType::uint8, {static_cast<int64_t>(q.codes.size())}, to_bytes(q.codes)});
    file.tensors.push_back({name + ".scale", DType::fp32, grid, to_bytes(q.scales)});
  }
  nlohmann::ordered_json d = {{"scheme", std::string(to_string(q.scheme))},
                              {"shape", {q.rows, q.cols}},
                              {"tile", {q.tile_rows, q.tile_cols}},
                              {"element", fp4 ? "fp4_e2m1" : "fp8_e4m3"},
                              {"scale_dtype", fp4 ? "fp8_e4m3" : "fp32"}};
  if (!fp4) d["pow2_scales"] = pow2_scales;
  if (!source_dtype.empty()) d["source_dtype"] = std::string(source_dtype);
  file.metadata[detail::block_metadata_key(name)] = d.dump();
}

bool is_block_scaled_tensor(const SafeTensorsFile& file, std::string_view name) {
  return description(file, name).has_value();
}

BlockScaledTensor get_block_scaled_tensor(const SafeTensorsFile& file, std::string_view name) {
  const std::optional<json> d = description(file, name);
  if (!d) fail(name, "no nvfp4/fp8-block description '" + detail::block_metadata_key(name) + "'");
  BlockScaledTensor q;
  std::vector<int64_t> shape, tile;
  std::string element, scale_dtype;
  try {
    q.scheme = d->at("scheme") == "nvfp4" ? BlockScheme::nvfp4 : BlockScheme::fp8_block;
    shape = d->at("shape").get<std::vector<int64_t>>();
    tile = d->at("tile").get<std::vector<int64_t>>();
    element = d->at("element").get<std::string>();
    scale_dtype = d->at("scale_dtype").get<std::string>();
  } catch (const json::exception&) {
    fail(name, "metadata '" + detail::block_metadata_key(name) +
                   "' lacks a field or has a wrong type (needs scheme, shape, tile, element, "
                   "scale_dtype)");
  }
  const bool fp4 = q.scheme == BlockScheme::nvfp4;
  const int tc = block_scaled_tile_cols(q.scheme);
  if (shape.size() != 2 || shape[0] < 0 || shape[1] < 0 ||
      (shape[1] > 0 && shape[0] > (int64_t{1} << 40) / shape[1]))
    fail(name, "shape must be [rows, cols] of at most 2^40 values");
  if (tile.size() != 2 || tile[1] != tc || (tile[0] != 1 && tile[0] != tc))
    fail(name, "tile must be [1, " + std::to_string(tc) + "] or [" + std::to_string(tc) + ", " +
                   std::to_string(tc) + "] for " + std::string(to_string(q.scheme)));
  if (element != (fp4 ? "fp4_e2m1" : "fp8_e4m3") || scale_dtype != (fp4 ? "fp8_e4m3" : "fp32"))
    fail(name, "element '" + element + "' / scale_dtype '" + scale_dtype + "' do not belong to " +
                   std::string(to_string(q.scheme)));
  q.rows = shape[0];
  q.cols = shape[1];
  q.tile_rows = static_cast<int>(tile[0]);
  q.tile_cols = tc;
  const int64_t n = q.rows * q.cols, tiles = q.tile_grid_rows() * q.tile_grid_cols();
  const std::string nm(name);

  const SafeTensor& codes = companion(file, name, nm, DType::uint8, fp4 ? (n + 1) / 2 : n);
  const auto* cb = reinterpret_cast<const uint8_t*>(codes.data.data());
  q.codes.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t c = fp4 ? static_cast<uint8_t>((cb[i / 2] >> (4 * (i % 2))) & 0xF) : cb[i];
    if (!fp4 && (c & 0x7F) == 0x7F)
      fail(name,
           "element " + std::to_string(i) + " is an E4M3 NaN code, which no quantizer writes");
    q.codes[static_cast<size_t>(i)] = c;
  }
  q.scales.resize(static_cast<size_t>(tiles));
  if (fp4) {
    const SafeTensor& sc = companion(file, name, nm + ".scale", DType::uint8, tiles);
    q.scale_codes.resize(static_cast<size_t>(tiles));
    if (tiles) std::memcpy(q.scale_codes.data(), sc.data.data(), q.scale_codes.size());
    for (size_t t = 0; t < q.scale_codes.size(); ++t) {
      // Block scales are E4M3 values in [0, 448]: no sign, no NaN (0x7F).
      if (q.scale_codes[t] >= 0x7F)
        fail(name, "scale " + std::to_string(t) + " has code " + std::to_string(q.scale_codes[t]) +
                       ", not an E4M3 value in [0, 448]");
      q.scales[t] = static_cast<float>(decode_float(kFp8E4M3, q.scale_codes[t]));
    }
    const SafeTensor& amax = companion(file, name, nm + ".amax", DType::fp32, 1);
    std::memcpy(&q.global_amax, amax.data.data(), 4);
    if (!std::isfinite(q.global_amax) || q.global_amax < 0.0f)
      fail(name, "amax must be finite and not negative");
  } else {
    const SafeTensor& sc = companion(file, name, nm + ".scale", DType::fp32, tiles);
    if (tiles) std::memcpy(q.scales.data(), sc.data.data(), 4 * q.scales.size());
    for (size_t t = 0; t < q.scales.size(); ++t) {
      if (!std::isfinite(q.scales[t]) || q.scales[t] < 0.0f)
        fail(name, "scale " + std::to_string(t) + " must be finite and not negative");
    }
  }
  return q;
}

BlockTensor to_mx_block_tensor(const BlockScaledTensor& q, const std::vector<int64_t>& shape) {
  if (q.scheme != BlockScheme::mxfp4 || q.tile_rows != 1)
    throw std::invalid_argument("to_mx_block_tensor: needs an mxfp4 tensor of 1x32 blocks");
  BlockTensor b;
  b.scheme = "mxfp4";
  b.shape = shape;
  b.block_size = q.tile_cols;
  b.element = DType::fp4_e2m1;
  b.scale_dtype = DType::e8m0;
  b.data.assign((q.codes.size() + 1) / 2, 0);
  for (size_t i = 0; i < q.codes.size(); ++i)
    b.data[i / 2] |= static_cast<uint8_t>((q.codes[i] & 0xF) << (4 * (i % 2)));
  b.scales = q.scale_codes;
  return b;
}

}  // namespace mixp
