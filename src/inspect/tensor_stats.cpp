// Tensor statistics and per-format overflow / underflow / subnormal counts (tensor_stats.h),
// rounding every value through mixp's format codecs.
#include "mixp/inspect/tensor_stats.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "mixp/autograd/grad_mode.h"
#include "mixp/format/block_int8.h"
#include "mixp/format/block_mx.h"
#include "mixp/format/float_codec.h"

namespace mixp::inspect {
namespace {

constexpr std::array<StatFormat, 6> kAll = {StatFormat::fp16,     StatFormat::bf16,
                                            StatFormat::fp8_e4m3, StatFormat::fp8_e5m2,
                                            StatFormat::mxfp8,    StatFormat::int8};

struct Counts {
  int64_t overflow = 0, underflow = 0, subnormal = 0;
  double sq_err = 0;
};

// An element-wise cast to `fmt`: value of x rounded with `overflow`, and whether it overflowed.
struct Rounded {
  double ieee;  // nearest-even, IEEE overflow (inf/NaN)
  double sat;   // nearest-even, saturating
};
Rounded round_to(const FloatFormat& fmt, double x) {
  const uint32_t a = encode_float(fmt, x, Round::nearest_even, Overflow::ieee, 0, nullptr);
  const uint32_t b = encode_float(fmt, x, Round::nearest_even, Overflow::saturate, 0, nullptr);
  return {decode_float(fmt, a), decode_float(fmt, b)};
}

Counts float_counts(std::span<const float> x, const FloatFormat& fmt) {
  const double min_normal = std::ldexp(1.0, 1 - fmt.bias);
  int64_t ov = 0, un = 0, sub = 0;
  double err = 0;
  const int64_t n = int64_t(x.size());
#pragma omp parallel for reduction(+ : ov, un, sub, err) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[size_t(i)];
    if (!std::isfinite(v)) continue;
    const Rounded r = round_to(fmt, v);
    if (!std::isfinite(r.ieee)) ++ov;
    if (v != 0 && r.ieee == 0) ++un;
    if (r.ieee != 0 && std::isfinite(r.ieee) && std::fabs(r.ieee) < min_normal) ++sub;
    err += (r.sat - v) * (r.sat - v);
  }
  return {ov, un, sub, err};
}

Counts mx_counts(std::span<const float> x, int64_t row_len) {
  constexpr int kBlock = kMxDefaultBlock;
  const double min_normal = std::ldexp(1.0, 1 - kFp8E4M3.bias);
  const int64_t rows = row_len > 0 ? int64_t(x.size()) / row_len : 0;
  const int64_t blocks_per_row = (row_len + kBlock - 1) / kBlock;
  int64_t ov = 0, un = 0, sub = 0;
  double err = 0;
#pragma omp parallel for reduction(+ : ov, un, sub, err) schedule(static)
  for (int64_t b = 0; b < rows * blocks_per_row; ++b) {
    const int64_t r = b / blocks_per_row, c0 = (b % blocks_per_row) * kBlock;
    const int64_t len = std::min<int64_t>(kBlock, row_len - c0);
    const std::span<const float> blk = x.subspan(size_t(r * row_len + c0), size_t(len));
    const e8m0 s = mx_shared_scale(blk, MxElement::fp8_e4m3);
    if (s.bits == 0xFF) continue;  // a block with inf/NaN decodes to NaN: no finite element
    const int shared = int(s.bits) - 127;
    for (const float f : blk) {
      const double v = f;
      const double scaled = std::ldexp(v, -shared);
      const uint32_t code = mx_encode_element(MxElement::fp8_e4m3, scaled, Round::nearest_even, 0);
      const double e = mx_decode_element(MxElement::fp8_e4m3, code);
      const double q = double(float(std::ldexp(e, shared)));  // decoded to fp32, as mx_dequantize
      const double wide = decode_float(
          kFp8E4M3, encode_float(kFp8E4M3, scaled, Round::nearest_even, Overflow::ieee, 0, nullptr));
      if (!std::isfinite(wide)) ++ov;
      if (v != 0 && e == 0) ++un;
      if (e != 0 && std::fabs(e) < min_normal) ++sub;
      err += (q - v) * (q - v);
    }
  }
  return {ov, un, sub, err};
}

Counts int8_counts(std::span<const float> x, float amax) {
  const QParams p = compute_qparams(-amax, amax, Int8Config{});
  int64_t ov = 0, un = 0;
  double err = 0;
  const int64_t n = int64_t(x.size());
#pragma omp parallel for reduction(+ : ov, un, err) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[size_t(i)];
    if (!std::isfinite(v)) continue;
    bool in_range = true;
    const float q = fake_quantize_int8_value(v, p, &in_range);
    if (!in_range) ++ov;
    if (v != 0 && q == 0) ++un;
    err += (double(q) - double(v)) * (double(q) - double(v));
  }
  return {ov, un, 0, err};
}

}  // namespace

const char* to_string(StatFormat f) {
  switch (f) {
    case StatFormat::fp16: return "fp16";
    case StatFormat::bf16: return "bf16";
    case StatFormat::fp8_e4m3: return "fp8_e4m3";
    case StatFormat::fp8_e5m2: return "fp8_e5m2";
    case StatFormat::mxfp8: return "mxfp8";
    case StatFormat::int8: return "int8";
  }
  return "?";
}

std::optional<StatFormat> parse_stat_format(std::string_view name) {
  for (StatFormat f : kAll)
    if (name == to_string(f)) return f;
  return std::nullopt;
}

std::span<const StatFormat> all_stat_formats() {
  return kAll;
}

TensorStats tensor_stats(std::span<const float> x, int64_t row_len,
                         std::span<const StatFormat> formats) {
  TensorStats s;
  s.numel = int64_t(x.size());
  int64_t nan = 0, inf = 0, zeros = 0, finite = 0;
  float amax = 0, amin = std::numeric_limits<float>::infinity();
  double sq = 0;
  const int64_t n = s.numel;
#pragma omp parallel for reduction(+ : nan, inf, zeros, finite, sq) reduction(max : amax) \
    reduction(min : amin) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[size_t(i)];
    if (std::isnan(v)) {
      ++nan;
    } else if (std::isinf(v)) {
      ++inf;
    } else {
      ++finite;
      const float a = std::fabs(v);
      amax = std::max(amax, a);
      if (a != 0) amin = std::min(amin, a);
      if (a == 0) ++zeros;
      sq += double(v) * double(v);
    }
  }
  s.nan = nan;
  s.inf = inf;
  s.zeros = zeros;
  s.amax = amax;
  s.amin_nz = std::isfinite(amin) ? double(amin) : 0.0;
  s.dynamic_range = s.amin_nz > 0 ? std::log2(s.amax / s.amin_nz) : 0.0;
  s.rms = finite > 0 ? std::sqrt(sq / double(finite)) : 0.0;
  for (StatFormat f : formats) {
    Counts c;
    switch (f) {
      case StatFormat::fp16: c = float_counts(x, kFp16); break;
      case StatFormat::bf16: c = float_counts(x, kBf16); break;
      case StatFormat::fp8_e4m3: c = float_counts(x, kFp8E4M3); break;
      case StatFormat::fp8_e5m2: c = float_counts(x, kFp8E5M2); break;
      case StatFormat::mxfp8: c = mx_counts(x, std::max<int64_t>(row_len, 1)); break;
      case StatFormat::int8: c = int8_counts(x, amax); break;
    }
    s.formats.push_back(FormatStats{f, c.overflow, c.underflow, c.subnormal,
                                    finite > 0 ? c.sq_err / double(finite) : 0.0});
  }
  return s;
}

std::vector<float> values_as_fp32(const Tensor& t, double scale) {
  if (!t.defined() || !t.is_floating_point())
    throw std::invalid_argument("mixp::inspect: statistics need a floating tensor");
  NoGradGuard ng;
  Tensor f = t.detach();
  if (f.dtype() != DType::fp32) f = f.to(DType::fp32, Round::nearest_even);
  f = f.contiguous();
  const float* p = f.data<float>();
  std::vector<float> v(p, p + f.numel());
  if (scale != 1.0)
    for (float& e : v) e = float(double(e) * scale);
  return v;
}

TensorStats tensor_stats(const Tensor& t, std::span<const StatFormat> formats, double scale) {
  const std::vector<float> v = values_as_fp32(t, scale);
  const int64_t row = t.dim() > 0 ? t.size(-1) : 1;
  return tensor_stats(v, row, formats);
}

}  // namespace mixp::inspect
