// Bulk converters: argument checks, run-time dispatch and the scalar reference
// (include/mixp/format/convert.h). Baseline x86-64 only: the SIMD kernels live in
// convert_avx2.cpp / convert_avx512.cpp and are reached through convert_kernels.h.
#include <algorithm>
#include <bit>
#include <cstring>
#include <stdexcept>
#include <string>

#include "format/convert_kernels.h"
#include "util/enum_names.h"

namespace mixp {
namespace {

// The block schemes (block_tensor.h) that store a format, for the formats that have one.
constexpr detail::EnumName<DType> kBlockSchemes[] = {
    {DType::fp6_e2m3, "mxfp6_e2m3"}, {DType::fp6_e3m2, "mxfp6_e3m2"},
    {DType::fp4_e2m1, "mxfp4"},      {DType::int8, "int8, int8_affine, int8_channel or mxint8"},
    {DType::int4, "int4"},           {DType::nf4, "nf4"}};

// The block scheme that stores `t`, or "" if none does.
const char* block_scheme_for(DType t) {
  return detail::name_of(kBlockSchemes, t, "");
}

[[noreturn]] void reject(DType t, const char* what) {
  std::string msg = std::string(what) + ": format '" + std::string(name(t)) + "' ";
  const std::string scheme = block_scheme_for(t);
  if (t == DType::fp64) {
    msg += "is wider than fp32; the bulk converters go between fp32 and narrower element formats";
  } else if (!scheme.empty()) {
    msg +=
        "is a block/quantized format whose elements need a shared scale; use the block API "
        "mixp::quantize_block / dequantize_block (mixp/format/block_tensor.h) with scheme " +
        scheme + ", not the element-wise converter";
  } else {
    msg += "is not an element-wise floating-point format";
  }
  msg += ". Element-wise formats: fp32, tf32, bf16, fp16, fp8_e4m3, fp8_e5m2";
  throw std::invalid_argument(msg);
}

int storage_bytes(DType t) {
  return (t == DType::fp32 || t == DType::tf32) ? 4 : traits(t).bits / 8;
}

// fp32 -> fp64 by bit manipulation. static_cast<double> would do the same, except that with
// MXCSR.DAZ set it flushes denormal inputs to zero; the converters must not depend on the MXCSR.
double exact_double(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint64_t sign = uint64_t{u >> 31} << 63;
  const uint32_t e = (u >> 23) & 0xFF;
  const uint64_t f = u & 0x7FFFFF;
  uint64_t d;
  if (e == 0xFF) {
    d = sign | (uint64_t{0x7FF} << 52) | (f << 29);
  } else if (e == 0) {
    if (f == 0) return std::bit_cast<double>(sign);
    const int p = 31 - std::countl_zero(static_cast<uint32_t>(f));  // f = 1.xxx * 2^p * 2^-149
    d = sign | (static_cast<uint64_t>(p - 149 + 1023) << 52) |
        ((f << (52 - p)) & ((uint64_t{1} << 52) - 1));
  } else {
    d = sign | (static_cast<uint64_t>(e - 127 + 1023) << 52) | (f << 29);
  }
  return std::bit_cast<double>(d);
}

// fp64 -> fp32 for values that fit exactly (every decode_float result of a format narrower than
// fp32), by bit manipulation so that MXCSR.FTZ cannot flush fp32 denormal results. NaN payloads
// are truncated like CVTSD2SS does.
float exact_float(double x) {
  const uint64_t u = std::bit_cast<uint64_t>(x);
  const uint32_t sign = static_cast<uint32_t>(u >> 63) << 31;
  const int dexp = static_cast<int>((u >> 52) & 0x7FF);
  const uint64_t frac = u & ((uint64_t{1} << 52) - 1);
  uint32_t b;
  if (dexp == 0x7FF) {
    b = sign | 0x7F800000U | static_cast<uint32_t>(frac >> 29);
  } else if (dexp == 0) {
    b = sign;  // only zero reaches here: no format here has values below 2^-1022
  } else if (dexp - 1023 >= -126) {
    b = sign | (static_cast<uint32_t>(dexp - 1023 + 127) << 23) | static_cast<uint32_t>(frac >> 29);
  } else {
    const uint64_t m = frac | (uint64_t{1} << 52);
    const int shift = -97 - (dexp - 1023);  // value = m * 2^(e-52), fp32 denormal unit 2^-149
    b = sign | (shift < 64 ? static_cast<uint32_t>(m >> shift) : 0U);
  }
  return std::bit_cast<float>(b);
}

void check_narrow(DType dst) {
  if (!is_elementwise_float(dst)) reject(dst, "convert_f32_to");
}
void check_widen(DType src) {
  if (!is_elementwise_float(src)) reject(src, "convert_to_f32");
}

bool tier_available(SimdTier t) {
  const CpuFeatures& f = cpu_features();
  switch (t) {
    case SimdTier::scalar:
      return true;
    case SimdTier::avx2:
      return f.use_avx2();
    case SimdTier::avx512:
      return f.use_avx512() && f.use_avx2();
  }
  return false;
}

void narrow_on(SimdTier tier, bool hardware, DType dst, std::span<const float> src, void* dst_bits,
               const ConvertOptions& opt) {
  const size_t n = src.size();
  const size_t ob = static_cast<size_t>(storage_bytes(dst));
  size_t done = 0;
  while (done < n) {
    const uint64_t index = opt.offset + done;
    size_t len = n - done;
    if (opt.round == Round::stochastic) {
      // sr_key depends on the index's high word: keep each kernel call inside one 2^32 block.
      const uint64_t to_boundary = (uint64_t{1} << 32) - static_cast<uint32_t>(index);
      len = static_cast<size_t>(std::min<uint64_t>(len, to_boundary));
    }
    void* out = static_cast<unsigned char*>(dst_bits) + done * ob;
    const detail::NarrowArgs a{dst,
                               src.data() + done,
                               out,
                               len,
                               opt.round,
                               opt.overflow,
                               sr_key(opt.seed, index),
                               static_cast<uint32_t>(index),
                               hardware,
                               cpu_features().avx512_bf16};
    bool handled = false;
    if (tier == SimdTier::avx512) handled = detail::narrow_avx512(a);
    if (tier == SimdTier::avx2) handled = detail::narrow_avx2(a);
    if (!handled) {
      ConvertOptions o = opt;
      o.offset = index;
      convert_f32_to_reference(dst, src.subspan(done, len), out, o);
    }
    done += len;
  }
}

void widen_on(SimdTier tier, bool hardware, DType src, const void* src_bits, std::span<float> dst) {
  if (dst.empty()) return;
  const detail::WidenArgs a{src, src_bits, dst.data(), dst.size(), hardware};
  bool handled = false;
  if (tier == SimdTier::avx512) handled = detail::widen_avx512(a);
  if (tier == SimdTier::avx2) handled = detail::widen_avx2(a);
  if (!handled) convert_to_f32_reference(src, src_bits, dst);
}

}  // namespace

bool is_elementwise_float(DType t) {
  switch (t) {
    case DType::fp32:
    case DType::tf32:
    case DType::bf16:
    case DType::fp16:
    case DType::fp8_e4m3:
    case DType::fp8_e5m2:
      return true;
    default:
      return false;
  }
}

void detail::check_convert_sizes(size_t src, size_t dst) {
  if (src != dst) {
    throw std::invalid_argument("convert: source has " + std::to_string(src) +
                                " elements but destination has " + std::to_string(dst) +
                                "; the spans must have the same length");
  }
}

void convert_f32_to_reference(DType dst, std::span<const float> src, void* dst_bits,
                              const ConvertOptions& opt) {
  check_narrow(dst);
  const FloatFormat fmt = traits(dst).float_format();
  auto* out = static_cast<unsigned char*>(dst_bits);
  const int ob = storage_bytes(dst);
  for (size_t i = 0; i < src.size(); ++i) {
    const uint32_t r = opt.round == Round::stochastic ? sr_bits(opt.seed, opt.offset + i) : 0;
    uint32_t b = encode_float(fmt, exact_double(src[i]), opt.round, opt.overflow, r, nullptr);
    if (dst == DType::tf32)
      b = ((b >> 18) << 31) | ((b & 0x3FFFF) << 13);  // S.E8.M10 -> fp32 layout
    if (ob == 4) {
      std::memcpy(out + 4 * i, &b, 4);
    } else if (ob == 2) {
      const auto h = static_cast<uint16_t>(b);
      std::memcpy(out + 2 * i, &h, 2);
    } else {
      out[i] = static_cast<unsigned char>(b);
    }
  }
}

void convert_to_f32_reference(DType src, const void* src_bits, std::span<float> dst) {
  check_widen(src);
  if (src == DType::fp32 || src == DType::tf32) {
    if (!dst.empty()) std::memmove(dst.data(), src_bits, dst.size() * 4);
    return;
  }
  const FloatFormat fmt = traits(src).float_format();
  const auto* in = static_cast<const unsigned char*>(src_bits);
  for (size_t i = 0; i < dst.size(); ++i) {
    uint32_t b;
    if (traits(src).bits == 16) {
      uint16_t h;
      std::memcpy(&h, in + 2 * i, 2);
      b = h;
    } else {
      b = in[i];
    }
    dst[i] = exact_float(decode_float(fmt, b));
  }
}

void convert_f32_to(DType dst, std::span<const float> src, void* dst_bits,
                    const ConvertOptions& opt) {
  check_narrow(dst);
  narrow_on(simd_tier(), true, dst, src, dst_bits, opt);
}

void convert_to_f32(DType src, const void* src_bits, std::span<float> dst) {
  check_widen(src);
  widen_on(simd_tier(), true, src, src_bits, dst);
}

namespace detail {

std::span<const SimdTier> available_tiers() {
  static const auto list = [] {
    struct L {
      SimdTier t[3];
      size_t n = 0;
    } l;
    for (SimdTier t : {SimdTier::scalar, SimdTier::avx2, SimdTier::avx512}) {
      if (tier_available(t)) l.t[l.n++] = t;
    }
    return l;
  }();
  return {list.t, list.n};
}

void convert_f32_to_tier(SimdTier tier, bool hardware, DType dst, std::span<const float> src,
                         void* dst_bits, const ConvertOptions& opt) {
  check_narrow(dst);
  if (!tier_available(tier)) {
    throw std::invalid_argument(std::string("convert: this CPU cannot run the ") + to_string(tier) +
                                " tier");
  }
  narrow_on(tier, hardware, dst, src, dst_bits, opt);
}

void convert_to_f32_tier(SimdTier tier, bool hardware, DType src, const void* src_bits,
                         std::span<float> dst) {
  check_widen(src);
  if (!tier_available(tier)) {
    throw std::invalid_argument(std::string("convert: this CPU cannot run the ") + to_string(tier) +
                                " tier");
  }
  widen_on(tier, hardware, src, src_bits, dst);
}

}  // namespace detail
}  // namespace mixp
