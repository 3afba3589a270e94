// How a value is stored in each format; see include/mixp/format/describe.h.
#include "mixp/format/describe.h"

#include <locale.h>
#include <stdlib.h>

#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "mixp/format/float_codec.h"
#include "util/enum_names.h"

namespace mixp {
namespace {

constexpr std::array kDefaultFormats = {
    DType::fp64,     DType::fp32,     DType::tf32,     DType::bf16,     DType::fp16,
    DType::fp8_e4m3, DType::fp8_e5m2, DType::fp6_e2m3, DType::fp6_e3m2, DType::fp4_e2m1,
    DType::int8,     DType::int4,     DType::nf4};

// NF4 code values (QLoRA; docs/formats.md), ascending; index = the 4-bit code. Each is an fp32
// value printed exactly, so the table is the same one bitsandbytes uses.
constexpr std::array<double, 16> kNf4 = {-1.0,
                                         -0.6961928009986877,
                                         -0.5250730514526367,
                                         -0.39491748809814453,
                                         -0.28444138169288635,
                                         -0.18477343022823334,
                                         -0.09105003625154495,
                                         0.0,
                                         0.07958029955625534,
                                         0.16093020141124725,
                                         0.24611230194568634,
                                         0.33791524171829224,
                                         0.44070982933044434,
                                         0.5626170039176941,
                                         0.7229568362236023,
                                         1.0};
constexpr uint64_t kNf4Zero = 7;

constexpr double kTwo32 = 4294967296.0;

// Stochastic rounding's decision, the same rule as float_codec.h: up iff
// floor(fraction * 2^32) + random_bits >= 2^32, where fraction in [0, 1) is the part to drop.
bool stochastic_up(double fraction, uint32_t random_bits) {
  const double f32 = std::floor(fraction * kTwo32);
  return f32 + static_cast<double>(random_bits) >= kTwo32;
}

// Unit-scale integer storage: round, then saturate to [lo, hi].
void store_integer(const DTypeTraits& tr, double x, Round round, uint32_t rb, StoredValue& r) {
  const double hi = tr.max_finite;
  const double lo = tr.is_signed ? -hi - 1.0 : 0.0;
  if (std::isnan(x)) {
    r.value = 0.0;
    r.status = ConvertStatus::nan;
    return;
  }
  double q;
  if (std::isinf(x)) {
    q = x;
  } else {
    const double fl = std::floor(x);
    const double frac = x - fl;  // exact: fl and x share the binade's grid
    switch (round) {
      case Round::nearest_even:
        q = (frac > 0.5 || (frac == 0.5 && std::fmod(fl, 2.0) != 0.0)) ? fl + 1.0 : fl;
        break;
      case Round::nearest_away:
        q = std::round(x);
        break;
      case Round::toward_zero:
        q = std::trunc(x);
        break;
      case Round::stochastic:
        q = stochastic_up(frac, rb) ? fl + 1.0 : fl;
        break;
      default:
        q = fl;
    }
  }
  if (q > hi || q < lo) {
    r.value = q > hi ? hi : lo;
    r.status = ConvertStatus::overflow;
  } else {
    r.value = q + 0.0;  // no negative zero: integers have none
    r.status = q == x ? ConvertStatus::exact
                      : (q == 0.0 ? ConvertStatus::underflow : ConvertStatus::inexact);
  }
  const uint64_t mask = tr.bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << tr.bits) - 1;
  // int64's largest value is not a double: 2^63 stands for it (and must not reach the cast).
  const int64_t iv =
      r.value >= 0x1p63 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(r.value);
  r.bits = static_cast<uint64_t>(iv) & mask;
}

// Unit-scale nf4: pick a code among the two neighbours of x.
void store_nf4(double x, Round round, uint32_t rb, StoredValue& r) {
  uint64_t code = kNf4Zero;
  if (std::isnan(x)) {
    r.status = ConvertStatus::nan;
  } else if (x > 1.0 || x < -1.0) {
    code = x > 0 ? 15 : 0;
    r.status = ConvertStatus::overflow;
  } else {
    uint64_t hi = 1;
    while (hi < 15 && kNf4[hi] < x) ++hi;  // kNf4[hi-1] <= x <= kNf4[hi] (x in [-1, 1])
    const uint64_t lo = hi - 1;
    const double dlo = x - kNf4[lo], dhi = kNf4[hi] - x;
    bool up = dhi == 0.0;  // x is a code value: every mode keeps it
    if (!up && dlo != 0.0) {
      switch (round) {
        case Round::nearest_even:
          up = dhi < dlo;
          break;  // ties to the lower code (docs/formats.md)
        case Round::nearest_away:
          up = x > 0 ? dhi <= dlo : dhi < dlo;
          break;
        case Round::toward_zero:
          up = x < 0;
          break;  // hi is the neighbour nearer zero
        case Round::stochastic:
          up = stochastic_up(dlo / (kNf4[hi] - kNf4[lo]), rb);
          break;
        default:
          up = false;
      }
    }
    code = up ? hi : lo;
    const double v = kNf4[code];
    r.status = v == x ? ConvertStatus::exact
                      : (v == 0.0 ? ConvertStatus::underflow : ConvertStatus::inexact);
  }
  r.bits = code;
  r.value = kNf4[code];
}

uint64_t tf32_layout(uint32_t b19) {
  return (uint64_t{b19 >> 18} << 31) | ((b19 & 0x3FFFFu) << 13);
}

std::string binary(uint64_t v, int width) {
  std::string s(static_cast<size_t>(width), '0');
  for (int i = 0; i < width; ++i) {
    if ((v >> (width - 1 - i)) & 1) s[static_cast<size_t>(i)] = '1';
  }
  return s;
}

constexpr detail::EnumName<DKind> kKindNames[] = {{DKind::floating, "floating"},
                                                  {DKind::integer, "integer"},
                                                  {DKind::codebook, "codebook"},
                                                  {DKind::scale, "scale"},
                                                  {DKind::boolean, "boolean"}};

std::string_view kind_name(DKind k) {
  return detail::name_of(kKindNames, k);
}

}  // namespace

std::optional<double> parse_real(std::string_view text) {
  const auto space = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
  while (!text.empty() && space(text.front())) text.remove_prefix(1);
  while (!text.empty() && space(text.back())) text.remove_suffix(1);
  if (text.empty()) return std::nullopt;
  // strtod in the "C" locale whatever the process's locale is: glibc's strtod is correctly
  // rounded and reads decimal, hex-float, inf and nan; the caller's locale could change '.'.
  static const locale_t c_locale = newlocale(LC_ALL_MASK, "C", static_cast<locale_t>(nullptr));
  const std::string s(text);
  char* end = nullptr;
  const double v = strtod_l(s.c_str(), &end, c_locale);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return v;
}

std::span<const DType> describe_default_formats() {
  return kDefaultFormats;
}

bool is_describable(DType t) {
  const DKind k = traits(t).kind;
  return k == DKind::floating || k == DKind::integer || k == DKind::codebook;
}

StoredValue describe_value(DType t, double x, Round round, Overflow overflow,
                           uint32_t random_bits) {
  const DTypeTraits& tr = traits(t);
  StoredValue r{t, x, 0.0, 0, ConvertStatus::exact, 0.0, 0.0};
  switch (tr.kind) {
    case DKind::floating:
      if (t == DType::fp64) {  // the input itself: it was parsed to double
        r.value = x;
        r.bits = std::bit_cast<uint64_t>(x);
        r.status = std::isnan(x) ? ConvertStatus::nan : ConvertStatus::exact;
      } else {
        const FloatFormat fmt = tr.float_format();
        const uint32_t b = encode_float(fmt, x, round, overflow, random_bits, &r.status);
        r.value = decode_float(fmt, b);
        r.bits = t == DType::tf32 ? tf32_layout(b) : b;
      }
      break;
    case DKind::integer:
      store_integer(tr, x, round, random_bits, r);
      break;
    case DKind::codebook:
      store_nf4(x, round, random_bits, r);
      break;
    case DKind::scale:
    case DKind::boolean:
      throw std::invalid_argument("format '" + std::string(tr.name) +
                                  "' does not store values on its own; choose a value format");
  }
  if (std::isnan(x) || std::isnan(r.value)) {
    r.abs_error = r.rel_error = std::numeric_limits<double>::quiet_NaN();
  } else if (r.value == x) {  // also inf stored as the same inf
    r.abs_error = r.rel_error = 0.0;
  } else {
    r.abs_error = std::fabs(r.value - x);
    r.rel_error = r.abs_error / std::fabs(x);  // x != 0 here: 0 is exact in every format
  }
  return r;
}

int display_bits(DType t) {
  return traits(t).bits;
}

std::string bits_hex(DType t, uint64_t bits) {
  static constexpr char kHex[] = "0123456789abcdef";
  const int digits = (display_bits(t) + 3) / 4;
  std::string s = "0x";
  for (int i = digits - 1; i >= 0; --i) s += kHex[(bits >> (4 * i)) & 0xF];
  return s;
}

std::string bit_fields(DType t, uint64_t bits) {
  const DTypeTraits& tr = traits(t);
  if (tr.kind != DKind::floating) return binary(bits, tr.bits);
  const int E = tr.exp_bits, M = tr.man_bits;
  const int shift = t == DType::tf32 ? 13 : 0;  // tf32 lives in fp32's layout, low 13 bits zero
  const uint64_t sign = (bits >> (E + M + shift)) & 1;
  const uint64_t exp = (bits >> (M + shift)) & ((uint64_t{1} << E) - 1);
  const uint64_t man = (bits >> shift) & ((uint64_t{1} << M) - 1);
  return binary(sign, 1) + "|" + binary(exp, E) + "|" + binary(man, M);
}

FormatFacts format_facts(DType t) {
  const DTypeTraits& tr = traits(t);
  FormatFacts f{};
  f.format = t;
  f.kind = kind_name(tr.kind);
  f.bits = tr.bits;
  f.max_finite = tr.max_finite;
  f.min_positive = tr.min_subnormal;
  f.decimal_digits = tr.decimal_digits();
  f.block_size = tr.block_size;
  if (tr.block_size > 0) f.scale_dtype = tr.scale_dtype;
  f.safetensors = tr.safetensors;
  f.nan_rule = "none";
  if (tr.kind == DKind::floating || tr.kind == DKind::scale) {
    f.exponent_bits = tr.exp_bits;
    f.mantissa_bits = tr.man_bits;
    f.bias = tr.bias;
    f.epsilon = tr.epsilon();
  }
  if (tr.kind == DKind::integer) f.epsilon = 1.0;
  if (tr.kind == DKind::scale) {  // e8m0: 2^(E-127), 0xFF is NaN (OCP MX v1.0)
    f.nan_bits = 0xFF;
    f.nan_rule = "0xff";
    return f;
  }
  if (tr.kind != DKind::floating) return f;
  f.min_normal = tr.min_normal;
  if (t == DType::fp64) {
    f.inf_bits = 0x7FF0000000000000ULL;
    f.nan_bits = 0x7FF8000000000000ULL;
  } else {
    const FloatFormat fmt = tr.float_format();
    const auto relayout = [t](uint32_t b) {
      return t == DType::tf32 ? tf32_layout(b) : uint64_t{b};
    };
    if (tr.has_inf()) f.inf_bits = relayout(((1U << fmt.exp_bits) - 1) << fmt.man_bits);
    if (tr.has_nan()) {
      f.nan_bits = relayout(encode_float(fmt, std::numeric_limits<double>::quiet_NaN(),
                                         Round::nearest_even, Overflow::ieee, 0, nullptr));
    }
  }
  switch (tr.specials) {
    case Specials::ieee:
      f.nan_rule = "exponent all ones, mantissa non-zero";
      break;
    case Specials::fn:
      f.nan_rule = "only S.1111.111 (no inf)";
      break;
    case Specials::finite:
      f.nan_rule = "none (every pattern is a number)";
      break;
  }
  return f;
}

}  // namespace mixp
