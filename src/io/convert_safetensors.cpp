// Whole-file conversion; see include/mixp/io/convert_safetensors.h.
#include "mixp/io/convert_safetensors.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "mixp/format/block_tensor.h"
#include "mixp/format/convert.h"
#include "mixp/format/float_codec.h"
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

}  // namespace

ConvertTarget resolve_convert_target(std::string_view to) {
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
  return out;
}

void validate_convert_options(const FileConvertOptions& opt) {
  const ConvertTarget target = resolve_convert_target(opt.to);
  if (opt.block_size < 0) throw std::invalid_argument("block size must be positive");
  if (opt.block_size > 0 && !target.block) {
    throw std::invalid_argument("a block size applies to block formats only, not to " +
                                target.name);
  }
  if (target.block) {  // let the scheme judge block size and rounding on a two-element tensor
    const float zeros[2] = {0.0f, 0.0f};
    (void)quantize_block(zeros, {2}, BlockSpec{target.name, opt.block_size, opt.round, opt.seed});
  }
}

FileConversion convert_safetensors(const SafeTensorsFile& in, const FileConvertOptions& opt) {
  validate_convert_options(opt);
  const ConvertTarget target = resolve_convert_target(opt.to);
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
    if (!block_src && !is_float_source(src.dtype)) {  // integers and bools pass through
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
      if (block_src) {
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

      if (target.block) {
        BlockSpec spec{target.name, opt.block_size, opt.round, seed};
        const BlockTensor b = quantize_block(f32, r.shape, spec);
        std::vector<float> deq(f32.size());
        dequantize_block(b, deq);
        back.assign(deq.begin(), deq.end());
        r.to = b.scheme;
        r.bytes_after = block_bytes(b);
        add_block_tensor(result.file, nm, b, r.from);
      } else {
        const DType st = storage_of(target.dtype);
        SafeTensor out{nm, st, r.shape, {}};
        if (target.dtype == DType::fp64) {  // widening is exact
          out.data.resize(orig.size() * 8);
          if (!orig.empty()) std::memcpy(out.data.data(), orig.data(), out.data.size());
          back = orig;
        } else if (src.dtype == DType::fp64 && !block_src) {
          out.data = encode_from_double(target.dtype, orig, opt, seed, back);
        } else {
          out.data.resize(f32.size() * static_cast<size_t>(traits(st).storage_bytes));
          convert_f32_to(target.dtype, f32, out.data.data(),
                         ConvertOptions{opt.round, opt.overflow, seed, 0});
          std::vector<float> deq(f32.size());
          convert_to_f32(st == DType::fp32 ? DType::fp32 : target.dtype, out.data.data(), deq);
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
