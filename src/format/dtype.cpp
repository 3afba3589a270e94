// The traits table, generated from MIXP_DTYPE_LIST.
#include "mixp/format/dtype.h"

#include <array>
#include <cmath>
#include <stdexcept>

namespace mixp {
namespace {

constexpr double pow2(int e) {
  double v = 1.0;
  if (e >= 0) {
    for (int i = 0; i < e; ++i) v *= 2.0;
  } else {
    for (int i = 0; i < -e; ++i) v *= 0.5;
  }
  return v;
}

struct Range {
  double max_finite, min_normal, min_subnormal;
};

constexpr Range range_of(int bits, int E, int M, int bias, DKind kind, Specials sp,
                         bool is_signed) {
  switch (kind) {
    case DKind::floating: {
      const int emin = 1 - bias;
      int emax = (1 << E) - 1 - bias;           // top exponent field
      double top_mant = 2.0 - pow2(-M);         // 1.11..1
      if (sp == Specials::ieee) emax -= 1;      // top field is inf/NaN
      if (sp == Specials::fn) top_mant -= pow2(-M);  // S.1111.111 is NaN
      return {top_mant * pow2(emax), pow2(emin), pow2(emin - M)};
    }
    case DKind::scale: return {pow2(127), pow2(-127), pow2(-127)};
    case DKind::codebook: return {1.0, 1.0, 0.07958029955625534};  // nf4 code table's extremes
    case DKind::integer: {
      const double mx = is_signed ? pow2(bits - 1) - 1 : pow2(bits) - 1;
      return {mx, 1.0, 1.0};
    }
    case DKind::boolean: return {1.0, 1.0, 1.0};
  }
  return {0, 0, 0};
}

constexpr int storage_bytes_of(int bits) { return bits <= 8 ? 1 : bits / 8; }

constexpr std::array<DTypeTraits, kNumDTypes> kTable = {{
#define MIXP_X(id, nm, bits, E, M, bias, kind, sp, sgn, block, scale, st)               \
  DTypeTraits{DType::id,                                                                \
              nm,                                                                       \
              bits,                                                                     \
              E,                                                                        \
              M,                                                                        \
              bias,                                                                     \
              DKind::kind,                                                              \
              Specials::sp,                                                             \
              sgn,                                                                      \
              block,                                                                    \
              DType::scale,                                                             \
              st,                                                                       \
              range_of(bits, E, M, bias, DKind::kind, Specials::sp, sgn).max_finite,    \
              range_of(bits, E, M, bias, DKind::kind, Specials::sp, sgn).min_normal,    \
              range_of(bits, E, M, bias, DKind::kind, Specials::sp, sgn).min_subnormal, \
              storage_bytes_of(bits)},
    MIXP_DTYPE_LIST(MIXP_X)
#undef MIXP_X
}};

// Facts from docs/formats.md, checked at compile time against the generated table.
static_assert(kTable[static_cast<int>(DType::fp16)].max_finite == 65504.0);
static_assert(kTable[static_cast<int>(DType::bf16)].max_finite == 3.3895313892515355e38);
static_assert(kTable[static_cast<int>(DType::fp8_e4m3)].max_finite == 448.0);
static_assert(kTable[static_cast<int>(DType::fp8_e5m2)].max_finite == 57344.0);
static_assert(kTable[static_cast<int>(DType::fp6_e2m3)].max_finite == 7.5);
static_assert(kTable[static_cast<int>(DType::fp6_e3m2)].max_finite == 28.0);
static_assert(kTable[static_cast<int>(DType::fp4_e2m1)].max_finite == 6.0);
static_assert(kTable[static_cast<int>(DType::fp8_e4m3)].min_subnormal == 1.0 / 512);
static_assert(kTable[static_cast<int>(DType::fp8_e5m2)].min_subnormal == 1.0 / 65536);
static_assert(kTable[static_cast<int>(DType::fp16)].min_normal == 1.0 / 16384);

struct Alias {
  std::string_view alias;
  DType type;
};
constexpr Alias kAliases[] = {
    {"float64", DType::fp64},     {"double", DType::fp64},        {"float32", DType::fp32},
    {"float", DType::fp32},       {"tfloat32", DType::tf32},      {"bfloat16", DType::bf16},
    {"float16", DType::fp16},     {"half", DType::fp16},          {"e4m3", DType::fp8_e4m3},
    {"fp8", DType::fp8_e4m3},     {"float8_e4m3fn", DType::fp8_e4m3}, {"e5m2", DType::fp8_e5m2},
    {"float8_e5m2", DType::fp8_e5m2}, {"e2m3", DType::fp6_e2m3},  {"e3m2", DType::fp6_e3m2},
    {"e2m1", DType::fp4_e2m1},    {"fp4", DType::fp4_e2m1},       {"i8", DType::int8},
    {"u8", DType::uint8},         {"i4", DType::int4},
};

}  // namespace

double DTypeTraits::decimal_digits() const {
  if (kind == DKind::floating) return (man_bits + 1) * std::log10(2.0);
  if (kind == DKind::integer) return (bits - (is_signed ? 1 : 0)) * std::log10(2.0);
  return 0.0;
}

double DTypeTraits::epsilon() const {
  return kind == DKind::floating ? pow2(-man_bits) : 1.0;
}

const DTypeTraits& traits(DType t) { return kTable[static_cast<size_t>(t)]; }

std::span<const DTypeTraits> all_dtypes() { return kTable; }

std::optional<DType> find_dtype(std::string_view n) {
  for (const auto& t : kTable) {
    if (t.name == n) return t.id;
  }
  for (const auto& a : kAliases) {
    if (a.alias == n) return a.type;
  }
  return std::nullopt;
}

DType parse_dtype(std::string_view n) {
  if (auto t = find_dtype(n)) return *t;
  throw std::invalid_argument("unknown format '" + std::string(n) + "'; known formats: " +
                              dtype_names());
}

std::string dtype_names(bool floating_only) {
  std::string out;
  for (const auto& t : kTable) {
    if (floating_only && t.kind != DKind::floating) continue;
    if (!out.empty()) out += ", ";
    out += t.name;
  }
  return out;
}

std::optional<DType> dtype_from_safetensors(std::string_view s) {
  for (const auto& t : kTable) {
    if (!t.safetensors.empty() && t.safetensors == s) return t.id;
  }
  return std::nullopt;
}

}  // namespace mixp
