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
#include "mixp/format/convert.h"
#include "mixp/format/dtype.h"

namespace mixp::inspect {
namespace {

constexpr std::array<StatFormat, 6> kAll = {StatFormat::fp16,     StatFormat::bf16,
                                            StatFormat::fp8_e4m3, StatFormat::fp8_e5m2,
                                            StatFormat::mxfp8,    StatFormat::int8};

struct Counts {
  int64_t overflow = 0, underflow = 0, subnormal = 0;
  double sq_err = 0;
};

constexpr int64_t kChunk = 4096;

// Rounds x (nearest-even, IEEE overflow) through the bulk converters (format/convert.h), which
// are bit-identical to encode_float / decode_float, and back to fp32.
void round_chunk(DType dt, std::span<const float> x, std::span<float> q) {
  alignas(64) uint16_t bits[kChunk];
  convert_f32_to(dt, x, bits, ConvertOptions{Round::nearest_even, Overflow::ieee});
  convert_to_f32(dt, bits, q);
}

// Classifies x against its rounding q (nearest-even, IEEE overflow), branch-free so the loop
// vectorizes. A value that overflowed is counted at max finite for the MSE (the saturating cast:
// encode_float with Overflow::saturate). Non-finite x count nowhere.
struct Classify {
  float min_normal, max_finite;
  void operator()(std::span<const float> x, const float* q, int64_t& ov, int64_t& un,
                  int64_t& sub, double& err) const {
    int64_t o = 0, u = 0, s = 0;
    double e = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const float v = x[i], r = q[i];
      const bool fin = std::isfinite(v);
      const bool over = fin && !std::isfinite(r);
      o += over;
      u += fin && v != 0 && r == 0;
      s += fin && r != 0 && std::fabs(r) < min_normal;
      const float sat = over ? std::copysign(max_finite, v) : r;
      const double d = fin ? double(sat) - double(v) : 0.0;
      e += d * d;
    }
    ov += o, un += u, sub += s, err += e;
  }
};

Counts float_counts(std::span<const float> x, DType dt) {
  const Classify cls{float(traits(dt).min_normal), float(traits(dt).max_finite)};
  int64_t ov = 0, un = 0, sub = 0;
  double err = 0;
  const int64_t n = int64_t(x.size());
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for reduction(+ : ov, un, sub, err) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t b = c * kChunk, len = std::min(kChunk, n - b);
    alignas(64) float q[kChunk];
    const std::span<const float> xs = x.subspan(size_t(b), size_t(len));
    round_chunk(dt, xs, std::span<float>(q, size_t(len)));
    cls(xs, q, ov, un, sub, err);
  }
  return {ov, un, sub, err};
}

// MXFP8 (E4M3): per block of 32 along a row, the e8m0 scale X = 2^shared of block_mx.h; the
// element is x / X cast to E4M3 (saturating, as the spec prescribes: an element that would round
// beyond 448 counts as overflow; subnormal is judged on the element) and decodes to its value
// times X rounded to fp32 (mx_dequantize). Flushing and the error are judged on the values.
// Multiplying a float by a power of two rounds once, as the codec's double path does.
Counts mx_counts(std::span<const float> x, int64_t row_len) {
  constexpr int64_t kBlock = kMxDefaultBlock;
  const float min_normal = float(traits(DType::fp8_e4m3).min_normal);
  const float max_finite = float(traits(DType::fp8_e4m3).max_finite);
  const int64_t rows = int64_t(x.size()) / row_len;
  // Rows are cut into pieces of whole blocks, at most kChunk values each.
  const int64_t piece = kChunk / kBlock * kBlock;
  const int64_t pieces_per_row = (row_len + piece - 1) / piece;
  int64_t ov = 0, un = 0, sub = 0;
  double err = 0;
#pragma omp parallel for reduction(+ : ov, un, sub, err) schedule(static)
  for (int64_t p = 0; p < rows * pieces_per_row; ++p) {
    const int64_t r = p / pieces_per_row, c0 = (p % pieces_per_row) * piece;
    const int64_t len = std::min(piece, row_len - c0);
    const float* xs = x.data() + r * row_len + c0;
    alignas(64) float scaled[kChunk], q[kChunk], up[kChunk];
    alignas(64) uint8_t ok[kChunk];
    for (int64_t b0 = 0; b0 < len; b0 += kBlock) {
      const int64_t bl = std::min(kBlock, len - b0);
      const e8m0 s =
          mx_shared_scale(std::span<const float>(xs + b0, size_t(bl)), MxElement::fp8_e4m3);
      const bool finite_block = s.bits != e8m0::kNaN;
      const int shared = int(s.bits) - e8m0::kBias;
      const float down = finite_block ? std::ldexp(1.0f, -shared) : 0.0f;
      const float back = finite_block ? std::ldexp(1.0f, shared) : 0.0f;
      for (int64_t i = b0; i < b0 + bl; ++i) {
        scaled[i] = xs[i] * down;
        up[i] = back;
        ok[i] = finite_block;
      }
    }
    round_chunk(DType::fp8_e4m3, std::span<const float>(scaled, size_t(len)),
                std::span<float>(q, size_t(len)));
    int64_t o = 0, u = 0, sb = 0;
    double e = 0;
    for (int64_t i = 0; i < len; ++i) {
      if (!ok[i]) continue;  // a block with inf/NaN decodes to NaN: no finite element
      const float v = xs[i], r0 = q[i];
      const bool over = !std::isfinite(r0);
      const float el = over ? std::copysign(max_finite, scaled[i]) : r0;
      o += over;
      sb += el != 0 && std::fabs(el) < min_normal;
      u += v != 0 && el == 0;
      const double d = double(el * up[i]) - double(v);
      e += d * d;
    }
    ov += o, un += u, sub += sb, err += e;
  }
  return {ov, un, sub, err};
}

// PyTorch's per-tensor symmetric qint8 at the tensor's own scale: fake_quantize_int8_value of
// block_int8.h inlined (the same fp32 operations, so the same bits).
Counts int8_counts(std::span<const float> x, float amax) {
  const QParams p = compute_qparams(-amax, amax, Int8Config{});
  const float inv = 1.0f / p.scale;
  const float qmin = float(p.qmin), qmax = float(p.qmax);
  int64_t ov = 0, un = 0;
  double err = 0;
  const int64_t n = int64_t(x.size());
#pragma omp parallel for reduction(+ : ov, un, err) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[size_t(i)];
    if (!std::isfinite(v)) continue;
    // Nearest-even to an integer by the 2^23 trick: |v * inv| <= 128 here.
    const float t = v * inv;
    const float m = std::fabs(t);
    const float r = std::copysign(m < 0x1p23f ? (m + 0x1p23f) - 0x1p23f : m, t);
    const bool in = r >= qmin && r <= qmax;
    const float q = std::min(std::max(r, qmin), qmax) * p.scale;
    ov += !in;
    un += v != 0 && q == 0;
    const double d = double(q) - double(v);
    err += d * d;
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
      case StatFormat::fp16: c = float_counts(x, DType::fp16); break;
      case StatFormat::bf16: c = float_counts(x, DType::bf16); break;
      case StatFormat::fp8_e4m3: c = float_counts(x, DType::fp8_e4m3); break;
      case StatFormat::fp8_e5m2: c = float_counts(x, DType::fp8_e5m2); break;
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
  // Host access (docs/architecture.md 3.5): the statistics below are computed on a host copy.
  f = f.contiguous().to(Device::cpu());
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
