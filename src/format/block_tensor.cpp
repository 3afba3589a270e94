// The name-driven block-format entry point; see include/mixp/format/block_tensor.h.
#include "mixp/format/block_tensor.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "format/block_common.h"
#include "mixp/format/block_int4.h"
#include "mixp/format/block_int8.h"
#include "mixp/format/block_mx.h"

namespace mixp {
namespace {

enum class Family : uint8_t { mx, block4, int8_tensor, int8_affine, int8_channel };

struct Scheme {
  std::string_view name;
  Family family;
  MxElement mx;  // family mx
  Block4 b4;     // family block4
  DType element;
  DType scale;
  int default_block;
};

constexpr Scheme kSchemes[] = {
    {"mxfp8_e4m3", Family::mx, MxElement::fp8_e4m3, Block4::int4, DType::fp8_e4m3, DType::e8m0,
     kMxDefaultBlock},
    {"mxfp8_e5m2", Family::mx, MxElement::fp8_e5m2, Block4::int4, DType::fp8_e5m2, DType::e8m0,
     kMxDefaultBlock},
    {"mxfp6_e2m3", Family::mx, MxElement::fp6_e2m3, Block4::int4, DType::fp6_e2m3, DType::e8m0,
     kMxDefaultBlock},
    {"mxfp6_e3m2", Family::mx, MxElement::fp6_e3m2, Block4::int4, DType::fp6_e3m2, DType::e8m0,
     kMxDefaultBlock},
    {"mxfp4", Family::mx, MxElement::fp4_e2m1, Block4::int4, DType::fp4_e2m1, DType::e8m0,
     kMxDefaultBlock},
    {"mxint8", Family::mx, MxElement::int8, Block4::int4, DType::int8, DType::e8m0,
     kMxDefaultBlock},
    {"int4", Family::block4, MxElement::int8, Block4::int4, DType::int4, DType::fp32,
     kInt4DefaultBlock},
    {"nf4", Family::block4, MxElement::int8, Block4::nf4, DType::nf4, DType::fp32,
     kInt4DefaultBlock},
    {"int8", Family::int8_tensor, MxElement::int8, Block4::int4, DType::int8, DType::fp32, 0},
    {"int8_affine", Family::int8_affine, MxElement::int8, Block4::int4, DType::int8, DType::fp32,
     0},
    {"int8_channel", Family::int8_channel, MxElement::int8, Block4::int4, DType::int8, DType::fp32,
     0},
};

std::string names_joined() {
  std::string s;
  for (const auto& sc : kSchemes) {
    if (!s.empty()) s += ", ";
    s += sc.name;
  }
  return s;
}

const Scheme& find_scheme(std::string_view name) {
  for (const auto& sc : kSchemes) {
    if (sc.name == name) return sc;
  }
  throw std::invalid_argument("unknown block format '" + std::string(name) +
                              "'; known block formats: " + names_joined());
}

// Block size to use: 0 -> default; 4-bit packing needs an even size so every block starts on a
// byte boundary.
int resolve_block(const Scheme& sc, int requested) {
  if (sc.default_block == 0) return 0;  // int8 schemes have no blocks
  if (requested < 0) {
    throw std::invalid_argument(std::string(sc.name) + ": block size must be positive (got " +
                                std::to_string(requested) + "); the default is " +
                                std::to_string(sc.default_block));
  }
  const int bs = requested == 0 ? sc.default_block : requested;
  const bool four_bit = sc.element == DType::fp4_e2m1 || sc.family == Family::block4;
  if (four_bit && bs % 2 != 0) {
    throw std::invalid_argument(std::string(sc.name) + ": block size " + std::to_string(bs) +
                                " is odd, but two 4-bit codes share a byte; use an even size "
                                "(default " +
                                std::to_string(sc.default_block) + ")");
  }
  return bs;
}

int64_t row_len_of(const std::vector<int64_t>& shape) {
  return shape.empty() ? 1 : shape.back();
}

void check_input(std::span<const float> x, const std::vector<int64_t>& shape, const char* who) {
  const int64_t n = shape_numel(shape);
  if (n != static_cast<int64_t>(x.size())) {
    throw std::invalid_argument(std::string(who) + ": the shape holds " + std::to_string(n) +
                                " values but the buffer has " + std::to_string(x.size()));
  }
}

// Min/max over the finite values only (fake quantization keeps NaN and saturates inf).
MinMax finite_minmax(std::span<const float> x) {
  MinMax m{std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
  for (float v : x) {
    if (!std::isfinite(v)) continue;
    m.min = std::min(m.min, v);
    m.max = std::max(m.max, v);
  }
  return m;
}

void check_channel_rank(const std::vector<int64_t>& shape) {
  if (shape.empty()) {
    throw std::invalid_argument(
        "int8_channel needs a tensor of rank >= 1 (channels along axis "
        "0); use int8 for a scalar");
  }
}

const Int8Config kSymmetric{QDType::qint8, QScheme::symmetric, false};
const Int8Config kAffine{QDType::qint8, QScheme::affine, false};

// Fake int8 quantization under any rounding mode (fake_quantize_int8 is PyTorch's, nearest
// only): NaN stays NaN, inf saturates. `param_of(i)` gives value i's parameters.
template <class ParamOf>
void fake_int8(std::span<float> x, const BlockSpec& spec, ParamOf&& param_of) {
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) continue;
    const QParams& p = param_of(i);
    const uint32_t rb = spec.round == Round::stochastic ? sr_bits(spec.seed, i) : 0;
    x[i] = dequantize_int8_value(quantize_int8_value(x[i], p, spec.round, rb), p);
  }
}

QParams params_from(const BlockTensor& t, size_t i) {
  QParams p;
  p.scale = detail::load_f32_le(&t.scales[i * 4]);
  p.zero_point = t.zero_points.empty() ? 0 : t.zero_points[i];
  return p;  // qint8 full range: the only int8 element the named schemes produce
}

}  // namespace

bool is_block_scheme(std::string_view name) {
  return std::any_of(std::begin(kSchemes), std::end(kSchemes),
                     [&](const Scheme& s) { return s.name == name; });
}

std::vector<std::string> block_scheme_names() {
  std::vector<std::string> out;
  for (const auto& sc : kSchemes) out.emplace_back(sc.name);
  return out;
}

int default_block_size(std::string_view scheme) {
  return find_scheme(scheme).default_block;
}

int64_t shape_numel(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw std::invalid_argument("negative dimension " + std::to_string(d) + " in shape");
    n *= d;
  }
  return n;
}

std::vector<int64_t> block_scale_shape(const BlockTensor& t) {
  const Scheme& sc = find_scheme(t.scheme);
  const int64_t n = shape_numel(t.shape);
  switch (sc.family) {
    case Family::mx: {
      if (t.shape.empty()) return {1};
      std::vector<int64_t> s = t.shape;
      const int64_t k = s.back();
      s.back() = t.block_size > 0 ? (k + t.block_size - 1) / t.block_size : 0;
      return s;
    }
    case Family::block4:
      return {t.block_size > 0 ? (n + t.block_size - 1) / t.block_size : 0};
    case Family::int8_tensor:
    case Family::int8_affine:
      return {1};
    case Family::int8_channel:
      return {t.shape.empty() ? 0 : t.shape[0]};
  }
  return {};
}

BlockTensor quantize_block(std::span<const float> x, const std::vector<int64_t>& shape,
                           const BlockSpec& spec) {
  const Scheme& sc = find_scheme(spec.scheme);
  check_input(x, shape, "quantize_block");
  BlockTensor t;
  t.scheme = std::string(sc.name);
  t.shape = shape;
  t.block_size = resolve_block(sc, spec.block_size);
  t.element = sc.element;
  t.scale_dtype = sc.scale;
  const auto n = static_cast<int64_t>(x.size());
  switch (sc.family) {
    case Family::mx: {
      const int64_t row = row_len_of(shape);
      t.data.resize(static_cast<size_t>(mx_data_bytes(sc.mx, n)));
      t.scales.resize(static_cast<size_t>(mx_num_blocks(n, row, t.block_size)));
      mx_quantize(t.data, t.scales, x, row, sc.mx, MxOptions{t.block_size, spec.round, spec.seed});
      break;
    }
    case Family::block4: {
      t.data.resize(static_cast<size_t>(block4_data_bytes(n)));
      std::vector<float> scales(static_cast<size_t>(block4_num_blocks(n, t.block_size)));
      block4_quantize(t.data, scales, x, sc.b4, t.block_size, spec.round, spec.seed);
      t.scales = detail::f32_to_le_bytes(scales);
      break;
    }
    case Family::int8_tensor:
    case Family::int8_affine: {
      const MinMax mm = tensor_minmax(x);
      const QParams p =
          compute_qparams(mm.min, mm.max, sc.family == Family::int8_affine ? kAffine : kSymmetric);
      t.data.resize(x.size());
      quantize_int8(t.data, x, p, spec.round, spec.seed);
      t.scales = detail::f32_to_le_bytes(std::span<const float>(&p.scale, 1));
      if (sc.family == Family::int8_affine) t.zero_points = {p.zero_point};
      break;
    }
    case Family::int8_channel: {
      check_channel_rank(shape);
      const auto p = compute_qparams_per_channel(channel_minmax(x, shape, 0), kSymmetric);
      t.data.resize(x.size());
      quantize_int8_per_channel(t.data, x, shape, 0, p, spec.round, spec.seed);
      std::vector<float> s;
      for (const auto& c : p) s.push_back(c.scale);
      t.scales = detail::f32_to_le_bytes(s);
      break;
    }
  }
  return t;
}

void dequantize_block(const BlockTensor& t, std::span<float> out) {
  const Scheme& sc = find_scheme(t.scheme);
  const int64_t n = shape_numel(t.shape);
  if (n != static_cast<int64_t>(out.size())) {
    throw std::invalid_argument("dequantize_block: the shape holds " + std::to_string(n) +
                                " values but the output has room for " +
                                std::to_string(out.size()));
  }
  if (t.element != sc.element || t.scale_dtype != sc.scale) {
    throw std::invalid_argument(
        "dequantize_block: a " + std::string(sc.name) + " tensor must have element " +
        std::string(name(sc.element)) + " and scale " + std::string(name(sc.scale)) + ", not " +
        std::string(name(t.element)) + " and " + std::string(name(t.scale_dtype)));
  }
  const int bs = sc.default_block == 0 ? 0 : t.block_size;
  if (sc.default_block != 0 && bs <= 0) {
    throw std::invalid_argument("dequantize_block: " + std::string(sc.name) +
                                " needs a positive block size, got " + std::to_string(bs));
  }
  const auto fail = [&](const std::string& what) {
    throw std::invalid_argument("dequantize_block: " + std::string(sc.name) + " tensor: " + what);
  };
  switch (sc.family) {
    case Family::mx:
      mx_dequantize(out, t.data, t.scales, row_len_of(t.shape), sc.mx, bs);
      return;
    case Family::block4: {
      if (t.scales.size() % 4 != 0) fail("fp32 scales must be a multiple of 4 bytes");
      block4_dequantize(out, t.data, detail::le_bytes_to_f32(t.scales), sc.b4, bs);
      return;
    }
    case Family::int8_tensor:
    case Family::int8_affine: {
      const size_t nzp = sc.family == Family::int8_affine ? 1 : 0;
      if (t.scales.size() != 4 || t.zero_points.size() != nzp || t.data.size() != out.size()) {
        fail("expected " + std::to_string(out.size()) + " data bytes, 4 scale bytes and " +
             std::to_string(nzp) + " zero points; got " + std::to_string(t.data.size()) + ", " +
             std::to_string(t.scales.size()) + " and " + std::to_string(t.zero_points.size()));
      }
      dequantize_int8(out, t.data, params_from(t, 0));
      return;
    }
    case Family::int8_channel: {
      check_channel_rank(t.shape);
      const auto c = static_cast<size_t>(t.shape[0]);
      if (t.scales.size() != 4 * c || !t.zero_points.empty() || t.data.size() != out.size()) {
        fail("expected " + std::to_string(out.size()) + " data bytes and " + std::to_string(4 * c) +
             " scale bytes (one fp32 per channel along axis 0), no zero points; got " +
             std::to_string(t.data.size()) + ", " + std::to_string(t.scales.size()) + " and " +
             std::to_string(t.zero_points.size()));
      }
      std::vector<QParams> p;
      for (size_t i = 0; i < c; ++i) p.push_back(params_from(t, i));
      dequantize_int8_per_channel(out, t.data, t.shape, 0, p);
      return;
    }
  }
}

void fake_quantize_block(std::span<float> x, const std::vector<int64_t>& shape,
                         const BlockSpec& spec) {
  const Scheme& sc = find_scheme(spec.scheme);
  check_input(x, shape, "fake_quantize_block");
  const int bs = resolve_block(sc, spec.block_size);
  switch (sc.family) {
    case Family::mx:
      mx_fake_quantize(x, row_len_of(shape), sc.mx, MxOptions{bs, spec.round, spec.seed});
      return;
    case Family::block4:
      block4_fake_quantize(x, sc.b4, bs, spec.round, spec.seed);
      return;
    case Family::int8_tensor:
    case Family::int8_affine: {
      const MinMax mm = finite_minmax(x);
      const QParams p =
          compute_qparams(mm.min, mm.max, sc.family == Family::int8_affine ? kAffine : kSymmetric);
      fake_int8(x, spec, [&](size_t) -> const QParams& { return p; });
      return;
    }
    case Family::int8_channel: {
      check_channel_rank(shape);
      std::vector<MinMax> mm = channel_minmax(x, shape, 0);
      // Channels with NaN: choose parameters from their finite values.
      const int64_t inner = shape_numel(std::span<const int64_t>(shape).subspan(1));
      for (size_t c = 0; c < mm.size(); ++c) {
        if (std::isnan(mm[c].min) || std::isinf(mm[c].min) || std::isinf(mm[c].max)) {
          mm[c] =
              finite_minmax(x.subspan(c * static_cast<size_t>(inner), static_cast<size_t>(inner)));
        }
      }
      const auto p = compute_qparams_per_channel(mm, kSymmetric);
      fake_int8(x, spec, [&](size_t i) -> const QParams& {
        return p[static_cast<size_t>(static_cast<int64_t>(i) / std::max<int64_t>(inner, 1))];
      });
      return;
    }
  }
}

}  // namespace mixp
