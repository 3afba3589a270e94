// PyTorch-exact int8 quantization; see include/mixp/format/block_int8.h for the formulas.
#include "mixp/format/block_int8.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "format/block_common.h"

namespace mixp {
namespace {

void check_qparams(const QParams& p) {
  if (!(p.scale > 0.0f) || !std::isfinite(p.scale) || p.qmin >= p.qmax || p.zero_point < p.qmin ||
      p.zero_point > p.qmax) {
    throw std::invalid_argument(
        "invalid int8 quantization parameters (scale " + std::to_string(p.scale) + ", zero point " +
        std::to_string(p.zero_point) + ", range [" + std::to_string(p.qmin) + ", " +
        std::to_string(p.qmax) +
        "]); the scale must be positive and finite and the zero point inside the range");
  }
}

uint8_t to_byte(int32_t q, const QParams& p) {
  return p.is_signed() ? static_cast<uint8_t>(static_cast<int8_t>(q)) : static_cast<uint8_t>(q);
}
int32_t from_byte(uint8_t b, const QParams& p) {
  return p.is_signed() ? static_cast<int32_t>(static_cast<int8_t>(b)) : static_cast<int32_t>(b);
}

// Row-major geometry of `axis`: index i lies in channel (i / inner) % channels.
struct ChannelGeometry {
  int64_t channels;
  int64_t inner;
};
ChannelGeometry channel_geometry(std::span<const int64_t> shape, int axis, size_t numel,
                                 size_t nparams, const char* who) {
  const int rank = static_cast<int>(shape.size());
  const int a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) {
    throw std::invalid_argument(std::string(who) + ": channel axis " + std::to_string(axis) +
                                " is out of range for a tensor of rank " + std::to_string(rank));
  }
  int64_t n = 1;
  int64_t inner = 1;
  for (int d = 0; d < rank; ++d) {
    if (shape[d] < 0) throw std::invalid_argument(std::string(who) + ": negative dimension");
    n *= shape[d];
    if (d > a) inner *= shape[d];
  }
  if (static_cast<size_t>(n) != numel) {
    throw std::invalid_argument(std::string(who) + ": shape has " + std::to_string(n) +
                                " elements but the buffer has " + std::to_string(numel));
  }
  if (nparams != static_cast<size_t>(shape[a])) {
    throw std::invalid_argument(std::string(who) + ": " + std::to_string(nparams) +
                                " channel parameters for " + std::to_string(shape[a]) +
                                " channels along axis " + std::to_string(a));
  }
  return {shape[a], inner};
}

size_t channel_of(size_t i, const ChannelGeometry& g) {
  return static_cast<size_t>((static_cast<int64_t>(i) / std::max<int64_t>(g.inner, 1)) %
                             g.channels);
}

void check_sizes(size_t a, size_t b, const char* who) {
  if (a != b) {
    throw std::invalid_argument(std::string(who) + ": the output holds " + std::to_string(a) +
                                " values but the input " + std::to_string(b));
  }
}

}  // namespace

QuantRange quant_range(QDType dtype, bool reduce_range) {
  // PyTorch calculate_qmin_qmax: reduce_range drops one bit (for fbgemm's u8*s8 accumulation).
  if (dtype == QDType::qint8) return reduce_range ? QuantRange{-64, 63} : QuantRange{-128, 127};
  return reduce_range ? QuantRange{0, 127} : QuantRange{0, 255};
}

QParams compute_qparams(float min_val, float max_val, const Int8Config& cfg) {
  if (cfg.dtype == QDType::quint8 && cfg.scheme == QScheme::symmetric && cfg.reduce_range) {
    throw std::invalid_argument(
        "reduce_range is not supported for symmetric quint8 (PyTorch refuses it too); use "
        "qint8 for symmetric quantization or the affine scheme for quint8");
  }
  const QuantRange r = quant_range(cfg.dtype, cfg.reduce_range);
  QParams p{1.0f, 0, r.qmin, r.qmax};
  // PyTorch check_min_max_valid: an observer that saw nothing gives scale 1, zero point 0.
  if (min_val == std::numeric_limits<float>::infinity() &&
      max_val == -std::numeric_limits<float>::infinity()) {
    return p;
  }
  if (!std::isfinite(min_val) || !std::isfinite(max_val) || min_val > max_val) {
    throw std::invalid_argument("cannot choose int8 scale from min " + std::to_string(min_val) +
                                " and max " + std::to_string(max_val) +
                                ": they must be finite with min <= max (int8 has no NaN or inf; "
                                "remove them or use an MX/fp8 format)");
  }
  const float min_neg = std::min(min_val, 0.0f);
  const float max_pos = std::max(max_val, 0.0f);
  const float levels = static_cast<float>(r.qmax - r.qmin);
  if (cfg.scheme == QScheme::symmetric) {
    const float amax = std::max(-min_neg, max_pos);
    p.scale = std::max(amax / (levels / 2.0f), kQParamsMinScale);
    p.zero_point = cfg.dtype == QDType::quint8 ? 128 : 0;
  } else {
    p.scale = std::max((max_pos - min_neg) / levels, kQParamsMinScale);
    const float t = min_neg / p.scale;  // fp32, then torch.round (half to even)
    const double zp = r.qmin - detail::round_to_integer(t, Round::nearest_even, 0);
    p.zero_point = static_cast<int32_t>(std::clamp<double>(zp, r.qmin, r.qmax));
  }
  return p;
}

MinMax tensor_minmax(std::span<const float> x) {
  MinMax m{std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
  for (float v : x) {
    if (std::isnan(v)) return {v, v};
    m.min = std::min(m.min, v);
    m.max = std::max(m.max, v);
  }
  return m;
}

std::vector<MinMax> channel_minmax(std::span<const float> x, std::span<const int64_t> shape,
                                   int axis) {
  const int rank = static_cast<int>(shape.size());
  const int a = axis < 0 ? axis + rank : axis;
  const size_t channels = (a >= 0 && a < rank) ? static_cast<size_t>(shape[a]) : 0;
  const ChannelGeometry g = channel_geometry(shape, axis, x.size(), channels, "channel_minmax");
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<MinMax> mm(channels, MinMax{inf, -inf});
  for (size_t i = 0; i < x.size(); ++i) {
    MinMax& m = mm[channel_of(i, g)];
    const float v = x[i];
    if (std::isnan(m.min)) continue;
    if (std::isnan(v)) {
      m = {v, v};
    } else {
      m.min = std::min(m.min, v);
      m.max = std::max(m.max, v);
    }
  }
  return mm;
}

std::vector<QParams> compute_qparams_per_channel(std::span<const MinMax> mm,
                                                 const Int8Config& cfg) {
  std::vector<QParams> out;
  out.reserve(mm.size());
  for (const MinMax& m : mm) out.push_back(compute_qparams(m.min, m.max, cfg));
  return out;
}

int32_t quantize_int8_value(float x, const QParams& p, Round round, uint32_t random_bits) {
  const float v = x * (1.0f / p.scale);  // both steps in fp32, as PyTorch's quantize_val
  const double q = p.zero_point + detail::round_to_integer(v, round, random_bits);
  return static_cast<int32_t>(std::clamp<double>(q, p.qmin, p.qmax));
}

float dequantize_int8_value(int32_t q, const QParams& p) {
  return static_cast<float>(q - p.zero_point) * p.scale;
}

float fake_quantize_int8_value(float x, const QParams& p, bool* in_range) {
  if (std::isnan(x)) {
    if (in_range) *in_range = false;
    return x;
  }
  const float v = x * (1.0f / p.scale);
  const double q = p.zero_point + detail::round_to_integer(v, Round::nearest_even, 0);
  if (in_range) *in_range = q >= p.qmin && q <= p.qmax;
  const auto qc = static_cast<int32_t>(std::clamp<double>(q, p.qmin, p.qmax));
  return dequantize_int8_value(qc, p);
}

void quantize_int8(std::span<uint8_t> dst, std::span<const float> x, const QParams& p, Round round,
                   uint64_t seed) {
  check_qparams(p);
  check_sizes(dst.size(), x.size(), "quantize_int8");
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) {
      throw std::invalid_argument("quantize_int8: value " + std::to_string(i) +
                                  " is NaN, which int8 cannot store; clean the tensor or use an "
                                  "MX/fp8 format");
    }
    const uint32_t rb = round == Round::stochastic ? sr_bits(seed, i) : 0;
    dst[i] = to_byte(quantize_int8_value(x[i], p, round, rb), p);
  }
}

void dequantize_int8(std::span<float> dst, std::span<const uint8_t> q, const QParams& p) {
  check_qparams(p);
  check_sizes(dst.size(), q.size(), "dequantize_int8");
  for (size_t i = 0; i < q.size(); ++i) dst[i] = dequantize_int8_value(from_byte(q[i], p), p);
}

void fake_quantize_int8(std::span<float> x, const QParams& p, std::span<uint8_t> mask) {
  check_qparams(p);
  if (!mask.empty()) check_sizes(mask.size(), x.size(), "fake_quantize_int8 (mask)");
  for (size_t i = 0; i < x.size(); ++i) {
    bool ok = false;
    x[i] = fake_quantize_int8_value(x[i], p, &ok);
    if (!mask.empty()) mask[i] = ok ? 1 : 0;
  }
}

void quantize_int8_per_channel(std::span<uint8_t> dst, std::span<const float> x,
                               std::span<const int64_t> shape, int axis, std::span<const QParams> p,
                               Round round, uint64_t seed) {
  const ChannelGeometry g =
      channel_geometry(shape, axis, x.size(), p.size(), "quantize_int8_per_channel");
  check_sizes(dst.size(), x.size(), "quantize_int8_per_channel");
  for (const QParams& c : p) check_qparams(c);
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) {
      throw std::invalid_argument("quantize_int8_per_channel: value " + std::to_string(i) +
                                  " is NaN, which int8 cannot store; clean the tensor or use an "
                                  "MX/fp8 format");
    }
    const QParams& c = p[channel_of(i, g)];
    const uint32_t rb = round == Round::stochastic ? sr_bits(seed, i) : 0;
    dst[i] = to_byte(quantize_int8_value(x[i], c, round, rb), c);
  }
}

void dequantize_int8_per_channel(std::span<float> dst, std::span<const uint8_t> q,
                                 std::span<const int64_t> shape, int axis,
                                 std::span<const QParams> p) {
  const ChannelGeometry g =
      channel_geometry(shape, axis, q.size(), p.size(), "dequantize_int8_per_channel");
  check_sizes(dst.size(), q.size(), "dequantize_int8_per_channel");
  for (const QParams& c : p) check_qparams(c);
  for (size_t i = 0; i < q.size(); ++i) {
    const QParams& c = p[channel_of(i, g)];
    dst[i] = dequantize_int8_value(from_byte(q[i], c), c);
  }
}

void fake_quantize_int8_per_channel(std::span<float> x, std::span<const int64_t> shape, int axis,
                                    std::span<const QParams> p, std::span<uint8_t> mask) {
  const ChannelGeometry g =
      channel_geometry(shape, axis, x.size(), p.size(), "fake_quantize_int8_per_channel");
  if (!mask.empty()) check_sizes(mask.size(), x.size(), "fake_quantize_int8_per_channel (mask)");
  for (const QParams& c : p) check_qparams(c);
  for (size_t i = 0; i < x.size(); ++i) {
    bool ok = false;
    x[i] = fake_quantize_int8_value(x[i], p[channel_of(i, g)], &ok);
    if (!mask.empty()) mask[i] = ok ? 1 : 0;
  }
}

}  // namespace mixp
