// Whole-file conversion; see include/mixp/io/convert_safetensors.h.
#include "mixp/io/convert_safetensors.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>

#include "mixp/format/block_scaled.h"
#include "mixp/format/block_tensor.h"
#include "mixp/format/convert.h"
#include "mixp/format/float_codec.h"
#include "mixp/io/block_scaled_safetensors.h"
#include "mixp/io/quantized_safetensors.h"

namespace mixp {
namespace {

constexpr DType kElementTargets[] = {DType::fp64, DType::fp32,     DType::tf32,    DType::bf16,
                                     DType::fp16, DType::fp8_e4m3, DType::fp8_e5m2};

bool is_float_source(DType t) {
  return t == DType::fp64 || t == DType::fp32 || t == DType::bf16 || t == DType::fp16 ||
         t == DType::fp8_e4m3 || t == DType::fp8_e5m2;
}

// The stored dtype of an element target (tf32 has no safetensors dtype: fp32 values).
DType storage_of(DType t) {
  return t == DType::tf32 ? DType::fp32 : t;
}

uint64_t tensor_seed(uint64_t seed, size_t k) {
  return seed ^ (0x9E3779B97F4A7C15ULL * (static_cast<uint64_t>(k) + 1));
}

// |stored - original| with the conventions of TensorConversion::max_abs_error.
double element_error(double orig, double stored) {
  if (std::isnan(orig)) return std::isnan(stored) ? 0.0 : HUGE_VAL;
  if (std::isinf(orig)) return stored == orig ? 0.0 : HUGE_VAL;
  if (!std::isfinite(stored)) return HUGE_VAL;
  return std::fabs(stored - orig);
}

void measure(TensorConversion& r, std::span<const double> orig, std::span<const double> stored) {
  for (size_t i = 0; i < orig.size(); ++i) {
    r.max_abs_error = std::max(r.max_abs_error, element_error(orig[i], stored[i]));
    if (std::isfinite(orig[i]) && !std::isfinite(stored[i])) ++r.nonfinite_created;
    if (!std::isnan(orig[i]) && std::isnan(stored[i])) ++r.nan_created;
  }
}

uint64_t block_bytes(const BlockTensor& b) {
  return b.data.size() + b.scales.size() + 4 * b.zero_points.size();
}

// Element target from double sources (F64): rounds each value straight from the double.
std::vector<std::byte> encode_from_double(DType to, std::span<const double> x,
                                          const FileConvertOptions& opt, uint64_t seed,
                                          std::vector<double>& back) {
  const DTypeTraits& tr = traits(storage_of(to));
  std::vector<std::byte> out(x.size() * static_cast<size_t>(tr.storage_bytes));
  const FloatFormat fmt = traits(to).float_format();
  for (size_t i = 0; i < x.size(); ++i) {
    const uint32_t b = encode_float(fmt, x[i], opt.round, opt.overflow, sr_bits(seed, i), nullptr);
    back[i] = decode_float(fmt, b);
    if (to == DType::tf32 || to == DType::fp32) {
      const float f = static_cast<float>(back[i]);  // exact: the value is on the grid
      std::memcpy(out.data() + 4 * i, &f, 4);
    } else if (tr.storage_bytes == 2) {
      const uint16_t v = static_cast<uint16_t>(b);
      std::memcpy(out.data() + 2 * i, &v, 2);
    } else {
      out[i] = static_cast<std::byte>(b);
    }
  }
  return out;
}

// The recipe quantizer (format/block_scaled.h) a target uses, or nullopt: nvfp4, fp8-block, and
// mxfp4 with scale_mode "ceil". Throws std::invalid_argument for options that do not apply.
std::optional<BlockScaledOptions> recipe_quantizer(const ConvertTarget& t,
                                                   const FileConvertOptions& opt) {
  if (!opt.scale_mode.empty() && opt.scale_mode != "floor" && opt.scale_mode != "ceil")
    throw std::invalid_argument("scale mode '" + opt.scale_mode + "': use floor or ceil");
  if (!opt.scale_mode.empty() && t.name != "mxfp4")
    throw std::invalid_argument("a scale mode applies to mxfp4 only, not to " + t.name);
  const bool mx_ceil = t.name == "mxfp4" && opt.scale_mode == "ceil";
  if (!t.block_scaled && !mx_ceil) {
    if (opt.tile_rows != 0)
      throw std::invalid_argument("a tile applies to nvfp4 and fp8-block only, not to " + t.name);
    if (opt.pow2_scales) throw std::invalid_argument("power-of-two scales apply to fp8-block only");
    return std::nullopt;
  }
  BlockScaledOptions o;
  o.round = opt.round;
  o.pow2_scales = opt.pow2_scales;
  if (mx_ceil) {
    if (opt.block_size != 0 && opt.block_size != 32)
      throw std::invalid_argument("mxfp4 with the ceil scale mode has blocks of 32");
    if (opt.tile_rows != 0) throw std::invalid_argument("mxfp4 has 1x32 blocks; no tile applies");
    o.scheme = BlockScheme::mxfp4;
    o.tile_rows = 1;
  } else {
    if (opt.block_size != 0)
      throw std::invalid_argument(t.name + " has fixed blocks; choose the tile instead");
    o.scheme = t.name == "nvfp4" ? BlockScheme::nvfp4 : BlockScheme::fp8_block;
    const int tc = block_scaled_tile_cols(o.scheme);
    o.tile_rows = opt.tile_rows == 0 ? tc : opt.tile_rows;
    if (o.tile_rows != 1 && o.tile_rows != tc)
      throw std::invalid_argument(t.name + " tiles are 1x" + std::to_string(tc) + " or " +
                                  std::to_string(tc) + "x" + std::to_string(tc));
  }
  // Let the quantizer judge the rounding mode and pow2 option on one block of zeros.
  const std::vector<float> zeros(static_cast<size_t>(block_scaled_tile_cols(o.scheme)), 0.0f);
  (void)block_scaled_quantize(zeros, 1, static_cast<int64_t>(zeros.size()), o);
  return o;
}

// rows x cols of a tensor for the recipe quantizer: leading dims x last dim (rank 0: 1 x 1).
std::pair<int64_t, int64_t> as_matrix(const std::vector<int64_t>& shape) {
  if (shape.empty()) return {1, 1};
  return {shape_numel(std::span<const int64_t>(shape.data(), shape.size() - 1)), shape.back()};
}

uint64_t block_scaled_bytes(const BlockScaledTensor& q) {
  if (q.scheme == BlockScheme::fp8_block) return q.codes.size() + 4 * q.scales.size();
  return (q.codes.size() + 1) / 2 + q.scale_codes.size() + 4;
}

}  // namespace

ConvertTarget resolve_convert_target(std::string_view to) {
  if (to == "nvfp4") return {"nvfp4", true, DType::fp4_e2m1, true};
  if (to == "fp8-block" || to == "fp8_block") return {"fp8-block", true, DType::fp8_e4m3, true};
  if (is_block_scheme(to)) {  // int8, int4, nf4 are schemes (they need a scale)
    return {std::string(to), true, DType::int8};
  }
  if (const auto t = find_dtype(to)) {
    for (DType e : kElementTargets) {
      if (*t == e) return {std::string(name(e)), false, e};
    }
    switch (*t) {  // MX element types mean their MX scheme
      case DType::fp6_e2m3:
        return {"mxfp6_e2m3", true, *t};
      case DType::fp6_e3m2:
        return {"mxfp6_e3m2", true, *t};
      case DType::fp4_e2m1:
        return {"mxfp4", true, *t};
      case DType::int4:
        return {"int4", true, *t};
      case DType::nf4:
        return {"nf4", true, *t};
      case DType::int8:
        return {"int8", true, *t};
      default:
        break;
    }
  }
  throw std::invalid_argument("unknown target format '" + std::string(to) + "'; use one of " +
                              convert_target_names());
}

std::string convert_target_names() {
  std::string out;
  for (DType e : kElementTargets)
    out += std::string(out.empty() ? "" : ", ") + std::string(name(e));
  out += ", fp6_e2m3, fp6_e3m2, fp4_e2m1";
  for (const std::string& s : block_scheme_names()) out += ", " + s;
  return out + ", nvfp4, fp8-block";
}

void validate_convert_options(const FileConvertOptions& opt) {
  const ConvertTarget target = resolve_convert_target(opt.to);
  if (opt.block_size < 0) throw std::invalid_argument("block size must be positive");
  if (opt.block_size > 0 && !target.block) {
    throw std::invalid_argument("a block size applies to block formats only, not to " +
                                target.name);
  }
  if (recipe_quantizer(target, opt)) return;
  if (target.block) {  // let the scheme judge block size and rounding on a two-element tensor
    const float zeros[2] = {0.0f, 0.0f};
    (void)quantize_block(zeros, {2}, BlockSpec{target.name, opt.block_size, opt.round, opt.seed});
  }
}

FileConversion convert_safetensors(const SafeTensorsFile& in, const FileConvertOptions& opt) {
  validate_convert_options(opt);
  const ConvertTarget target = resolve_convert_target(opt.to);
  const std::optional<BlockScaledOptions> recipe = recipe_quantizer(target, opt);
  FileConversion result;
  // Metadata first: everything but the descriptions of block tensors this conversion decodes.
  for (const auto& [k, v] : in.metadata) {
    const bool block_desc =
        k.rfind(kBlockMetadataPrefix, 0) == 0 &&
        is_block_tensor(in, std::string_view(k).substr(kBlockMetadataPrefix.size())) &&
        in.find(std::string_view(k).substr(kBlockMetadataPrefix.size()));
    if (!block_desc) result.file.metadata[k] = v;
  }
  const std::vector<std::string> names = logical_tensor_names(in);
  for (size_t k = 0; k < names.size(); ++k) {
    const std::string& nm = names[k];
    const SafeTensor& src = *in.find(nm);
    const bool block_src = is_block_tensor(in, nm);
    TensorConversion r;
    r.name = nm;
    const uint64_t seed = tensor_seed(opt.seed, k);
    // Integers and bools pass through; so do tensors other than 2-D ones (biases, norms) under
    // nvfp4 and fp8-block, which quantize weight matrices only.
    if (!block_src &&
        (!is_float_source(src.dtype) || (target.block_scaled && src.shape.size() != 2))) {
      r.shape = src.shape;
      r.from = r.to = std::string(traits(src.dtype).safetensors);
      r.bytes_before = r.bytes_after = src.data.size();
      result.file.tensors.push_back(src);
      result.tensors.push_back(std::move(r));
      continue;
    }
    try {
      // The original values, in double so that F64 sources keep every bit for the error.
      std::vector<double> orig;
      std::vector<float> f32;
      if (block_src && is_block_scaled_tensor(in, nm)) {
        const BlockScaledTensor q = get_block_scaled_tensor(in, nm);
        r.from = to_string(q.scheme);
        r.bytes_before = block_scaled_bytes(q);
        f32 = read_tensor_f32(in, nm, &r.shape);
      } else if (block_src) {
        const BlockTensor b = get_block_tensor(in, nm);
        r.from = b.scheme;
        r.bytes_before = block_bytes(b);
        f32 = read_tensor_f32(in, nm, &r.shape);
      } else {
        r.from = std::string(traits(src.dtype).safetensors);
        r.bytes_before = src.data.size();
        r.shape = src.shape;
        if (src.dtype == DType::fp64) {
          orig.resize(src.data.size() / 8);
          if (!orig.empty()) std::memcpy(orig.data(), src.data.data(), src.data.size());
        }
        if (src.dtype != DType::fp64 || target.block) f32 = read_tensor_f32(in, nm);
      }
      if (orig.empty()) orig.assign(f32.begin(), f32.end());
      std::vector<double> back(orig.size());
      r.converted = true;

      if (recipe && (!target.block_scaled || r.shape.size() == 2)) {
        BlockScaledOptions o = *recipe;
        o.seed = seed;
        const auto [rows, cols] = as_matrix(r.shape);
        const BlockScaledTensor q = block_scaled_quantize(f32, rows, cols, o);
        std::vector<float> deq(f32.size());
        block_scaled_dequantize(q, deq);
        back.assign(deq.begin(), deq.end());
        r.to = target.name;
        r.bytes_after = block_scaled_bytes(q);
        if (q.scheme == BlockScheme::mxfp4) {
          add_block_tensor(result.file, nm, to_mx_block_tensor(q, r.shape), r.from);
          // Record the scale rule (the decoder does not need it: the scales are stored).
          auto d = nlohmann::ordered_json::parse(result.file.metadata.at("mixp." + nm));
          d["scale_mode"] = "ceil";
          result.file.metadata["mixp." + nm] = d.dump();
        } else {
          add_block_scaled_tensor(result.file, nm, q, o.pow2_scales, r.from);
        }
      } else if (target.block && !target.block_scaled) {
        BlockSpec spec{target.name, opt.block_size, opt.round, seed};
        const BlockTensor b = quantize_block(f32, r.shape, spec);
        std::vector<float> deq(f32.size());
        dequantize_block(b, deq);
        back.assign(deq.begin(), deq.end());
        r.to = b.scheme;
        r.bytes_after = block_bytes(b);
        add_block_tensor(result.file, nm, b, r.from);
      } else {
        // nvfp4/fp8-block keep a block source other than 2-D decoded, as F32.
        const DType to_dt = target.block_scaled ? DType::fp32 : target.dtype;
        const DType st = storage_of(to_dt);
        SafeTensor out{nm, st, r.shape, {}};
        if (to_dt == DType::fp64) {  // widening is exact
          out.data.resize(orig.size() * 8);
          if (!orig.empty()) std::memcpy(out.data.data(), orig.data(), out.data.size());
          back = orig;
        } else if (src.dtype == DType::fp64 && !block_src) {
          out.data = encode_from_double(to_dt, orig, opt, seed, back);
        } else {
          out.data.resize(f32.size() * static_cast<size_t>(traits(st).storage_bytes));
          convert_f32_to(to_dt, f32, out.data.data(),
                         ConvertOptions{opt.round, opt.overflow, seed, 0});
          std::vector<float> deq(f32.size());
          convert_to_f32(st == DType::fp32 ? DType::fp32 : to_dt, out.data.data(), deq);
          back.assign(deq.begin(), deq.end());
        }
        r.to = std::string(traits(st).safetensors);
        r.bytes_after = out.data.size();
        result.file.tensors.push_back(std::move(out));
      }
      measure(r, orig, back);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("tensor '" + nm + "': " + e.what());
    }
    result.tensors.push_back(std::move(r));
  }
  return result;
}

}  // namespace mixp
